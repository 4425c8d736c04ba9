"""The fleet store as the source a reading command takes instead of files: ``--store [URL]`` on ``history``,
``history render``, ``report render|merge`` and ``report compare``, and ``--host`` to read one runner's sessions of
it. ``--store URL`` reads that store; ``--store`` alone the one ``python -m hwregress store`` and the session use
(``HWREGRESS_STORE``, else ``sqlite:///reports/hwregress.sqlite``: :func:`hwregress.store.database.store_url`);
without ``--store`` the command reads its files as before. ``--store=`` (an empty URL) is refused, not taken for the
default. A reader never creates a store, and reads a SQLite file it cannot write (a read-only mount) read-only.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from hwregress.cli.common import RESULTS_FIX, CliError
from hwregress.store.results import SessionResults, TestRecord, record_problem
from hwregress.store.store_errors import NoStoreUrl, StoreUnavailable

if TYPE_CHECKING:
    from hwregress.store.fleet_store import Store

# the store's modules (SQLAlchemy, Alembic: ~1 s of a command's start) are imported by the functions that open one,
# so that a command reading files never imports them

REPORT_DIR = "reports"  # as python -m hwregress store: the default store is <report-dir>/hwregress.sqlite


class _NoUrl(str):
    """The value of a ``--store`` given without a URL (the default store): unlike ``--store=``, an empty URL."""


NO_URL = _NoUrl("")


def add_store_option(parser: argparse.ArgumentParser, what: str) -> None:
    """Add ``--store [URL]`` to ``parser``; ``what`` says what the command reads from the store."""
    parser.add_argument("--store", nargs="?", const=NO_URL, default=None, metavar="URL",
                        help=f"read {what} from the fleet store at this SQLAlchemy URL; without a URL: "
                             f"HWREGRESS_STORE, else sqlite:///{REPORT_DIR}/hwregress.sqlite (docs/store.md)")


def add_host_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--host NAME`` (repeatable) to ``parser``: only those runners' sessions of ``--store``."""
    parser.add_argument("--host", action="append", default=None, metavar="NAME",
                        help="with --store: only this runner's sessions, named by its host id or a hostname it had "
                             "(repeatable; default: every runner of each key, joined in one series)")


def check_host_option(args: argparse.Namespace) -> None:
    """Refuse ``--host`` without ``--store``: a history folder does not say which runner wrote a row.

    Raises:
        CliError: ``--host`` given and ``--store`` not.
    """
    if args.host and args.store is None:
        raise CliError("--host", f"{', '.join(args.host)} names a runner of the fleet store, and no --store was given",
                       "add --store [URL], or leave --host out to read the history folders")


def host_ids(store: Store, names: list[str] | None) -> list[str] | None:
    """The host ids ``names`` mean in ``store``: a host id as it is, a hostname every host that had it (two machines
    that shared one hostname both); None when ``names`` is empty or None (every host).

    Raises:
        CliError: a name is neither a host id nor a hostname of the store; the message lists the known hosts.
        StoreUnavailable: the store cannot be read.
    """
    if not names:
        return None
    known = store.hosts()
    found: list[str] = []
    for name in names:
        matching = [host["host_id"] for host in known if host["host_id"] == name or name in (host["aliases"] or [])]
        if not matching:
            listed = "; ".join(f"{host['host_id']} ({', '.join(host['aliases'] or []) or 'no hostname'})"
                               for host in known[:10]) or "none"
            more = f"; and {len(known) - 10} more (python -m hwregress store fleet)" if len(known) > 10 else ""
            raise CliError("--host", f"no host {name!r} in the store {store.url}",
                           f"give a host id or a hostname the store knows: {listed}{more}")
        found += [host for host in matching if host not in found]
    return found


def resolved_url(option: str) -> str:
    """The URL ``--store`` names (``option`` :data:`NO_URL`, a bare ``--store``: ``HWREGRESS_STORE``, else the default
    SQLite file).

    Raises:
        CliError: a URL that stores nothing: empty (``--store=``), an in-memory SQLite database.
    """
    return cli_store_url(None if isinstance(option, _NoUrl) else option)


def cli_store_url(option: str | None) -> str:
    """:func:`hwregress.store.database.store_url` of the command line (``option``: ``--store``'s value, None when
    not given), its default folder :data:`REPORT_DIR`.

    Raises:
        CliError: a URL that stores nothing: empty, an in-memory SQLite database.
    """
    from hwregress.store.database import store_url

    try:
        return store_url(option, os.environ, REPORT_DIR)
    except NoStoreUrl as error:
        raise CliError(error.where, error.what, error.fix) from None


@contextmanager
def reading_store(url: str) -> Iterator[Store]:
    """The store at ``url``, open for the ``with`` block and closed after it; a store that cannot be opened or read
    is a :class:`CliError` naming the URL (its secrets masked), what happened and the fix. A reader never creates a
    store: a SQLite file that is not there is an error, not a new empty database; a SQLite file it cannot write is
    opened read-only (``open_store(url, reading=True)``)."""
    from hwregress.store.database import masked, open_store, sqlite_files

    files = sqlite_files(url)
    if files and not files[0].exists():
        raise CliError(masked(url), "no such SQLite store",
                       "give the --store URL the sessions were pushed to (a session's --store, or store push)")
    try:
        store = open_store(url, reading=True)
    except StoreUnavailable as error:
        raise CliError(error.url, error.what, error.fix) from None
    try:
        yield store
    except StoreUnavailable as error:
        raise CliError(error.url, error.what, error.fix) from None
    finally:
        store.close()


def stored_session(store: Store, session_id: str) -> SessionResults:
    """The session whose name (``meta.session``) or UUID is ``session_id``, as a results file would load, each record
    checked against :class:`TestRecord`'s types.

    Raises:
        CliError: no such session (naming the closest ids the store holds), or a record the store holds is malformed.
    """
    from hwregress.store.session_results import SessionNotFound, session_results

    try:
        document = session_results(store, session_id)
    except SessionNotFound as error:
        closest = f"closest: {', '.join(error.closest)}" if error.closest else "the store holds none like it"
        raise CliError(store.url, f"no session {session_id!r} in the store",
                       f"give a session's name (results.json's meta.session) or id; {closest}") from None
    records = []
    for index, item in enumerate(document["records"]):
        problem = record_problem(item)
        if problem is not None:
            raise CliError(store.url, f"session {session_id}: record {index} ({item['test_id']}) is malformed: "
                                      f"{problem}", RESULTS_FIX)
        records.append(TestRecord.from_json(item))
    return SessionResults(document["meta"], records)
