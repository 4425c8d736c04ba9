"""A bisection's usage error: bad input the command line reports (exit 2) naming the option, the value and the fix."""

from __future__ import annotations


class BisectUsageError(ValueError):
    """Bad input to a bisection: ``where`` (the option or file), ``what`` is wrong with the value, and the ``fix``."""

    def __init__(self, where: str, what: str, fix: str) -> None:
        super().__init__(f"{where}: {what} ({fix})")
        self.where, self.what, self.fix = where, what, fix
