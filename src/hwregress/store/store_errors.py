"""What goes wrong choosing, reaching or writing the fleet store, as one line: :class:`NoStoreUrl` names a
``--store`` that stores nothing; :class:`StoreUnavailable` names the store's URL (its secrets masked), what happened and
the fix; :func:`unavailable` makes it from a driver's or SQLAlchemy's error; :class:`NotHwregress` is a database of
another application, which hwregress never writes."""

from __future__ import annotations

FLEET_FIX = "pip install 'hwregress[fleet]'"


class StoreUnavailable(Exception):
    """The store cannot be opened or written: ``<url>: <what> (<fix>)``, the URL's secrets masked.

    Attributes:
        url: the masked URL; what: what happened; fix: what to do.
    """

    def __init__(self, url: str, what: str, fix: str) -> None:
        super().__init__(f"{url}: {what} ({fix})")
        self.url, self.what, self.fix = url, what, fix


class NoStoreUrl(ValueError):
    """A store URL that stores nothing (empty, an in-memory database): ``<source>=<value>: <what> (<fix>)``, the value
    masked.

    Attributes:
        where: ``<source>=<value>``, e.g. ``--store='sqlite://'``; what: what is wrong; fix: what to do.
    """

    def __init__(self, where: str, what: str, fix: str) -> None:
        super().__init__(f"{where}: {what} ({fix})")
        self.where, self.what, self.fix = where, what, fix


class NotHwregress(Exception):
    """A database holding tables that make it no hwregress store (:func:`hwregress.store.tables.owned_by_hwregress`):
    found before anything is written to it.

    Attributes:
        tables: its tables and views.
    """

    def __init__(self, tables: list[str]) -> None:
        super().__init__(f"a database of another application ({', '.join(tables)})")
        self.tables = tables


# a connection the server ended, in libpq's words or the server's own: one reason, one fix
_DROPPED = ("the server dropped the connection",
            "check the server's log for a restart or a killed backend; a push is whole or nothing and safe to repeat")

# what the database's error says -> (what happened, the fix), first match wins
_REASONS = (
    ("database or disk is full", "the disk is full", "free space on its disk or point --store elsewhere"),
    ("disk i/o error", "a disk I/O error (a full or failing disk)", "free space or check the disk"),
    ("readonly database", "the file is read-only", "give a writable file with --store or HWREGRESS_STORE"),
    ("unable to open database file", "the file cannot be opened or created",
     "check its folder exists and is writable, or point --store elsewhere"),
    ("connection refused", "the server refused the connection",
     "start the database server or check the URL's host and port"),
    ("password authentication failed", "the server refused the user or password",
     "check the URL's user and password"),
    ("does not exist", "the server has no such database or role", "create it or correct the URL"),
    ("timeout", "the server did not answer in time", "check the server is up and reachable from here"),
    ("server closed the connection", *_DROPPED),
    ("terminating connection", *_DROPPED),
    ("could not translate host name", "the host name is unknown", "correct the URL's host"),
)


def unavailable(shown: str, error: BaseException) -> StoreUnavailable:
    """The :class:`StoreUnavailable` of an error opening or writing the store at ``shown`` (a masked URL)."""
    from alembic.util import CommandError  # here: a session that never reaches its store need not load Alembic

    if isinstance(error, CommandError):
        return StoreUnavailable(shown, f"its schema is not one this hwregress knows ({error})",
                                "upgrade hwregress to the version that last wrote the store")
    text = str(getattr(error, "orig", None) or error).strip().splitlines()[0] if str(error).strip() else repr(error)
    lowered = text.lower()
    for needle, what, fix in _REASONS:
        if needle in lowered:
            return StoreUnavailable(shown, f"{what}: {text}", fix)
    if isinstance(error, OSError):
        return StoreUnavailable(shown, f"cannot be created: {error.strerror or error}",
                                "check the folder is writable or point --store elsewhere")
    return StoreUnavailable(shown, f"cannot be used: {text}", "check the URL, the server and the disk")
