"""The nightly self-tests: the end-to-end ones that start real clusters, servers, multi-rank jobs or inductor compiles,
most of them to prove what happens when one dies, hangs or runs out of memory, 7-100 s each on a 2-core machine. They
carry the marker ``nightly`` and are skipped unless the run asks for them with ``--nightly``, so that the self-test
command CI runs on every change stays within its 15 minutes (docs/development.md, "Nightly self-tests"). A nightly job
runs ``.ci/run --nightly``; a change to what they cover runs ``python -m pytest tests -n 2 --nightly`` before it
lands."""

from __future__ import annotations

import pytest

OPTION = "--nightly"
MARKER = "nightly"
DESCRIPTION = ("self-test that starts real clusters, servers, multi-rank jobs or inductor compiles (most to see one "
               "die, hang or run out of memory), 7-100 s each: skipped unless the run passes --nightly")


def add_option(parser: pytest.Parser) -> None:
    """Register ``--nightly`` (a flag; default off)."""
    parser.addoption(OPTION, action="store_true", default=False,
                     help="also run the self-tests marked nightly (real clusters, servers and ranks that die, hang or "
                          "run out of memory; inductor compiles): about 5 more minutes of 2 cores")


def skip_unless_asked(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each collected item that carries ``nightly`` as skipped, with the option to pass as the reason, unless
    the run passed ``--nightly``; other items are left as they are."""
    if config.getoption(OPTION):
        return
    skip = pytest.mark.skip(reason=f"a nightly self-test: run it with {OPTION}")
    for item in items:
        if item.get_closest_marker(MARKER) is not None:
            item.add_marker(skip)
