"""Times as the stores keep them: aware UTC."""

from __future__ import annotations

import datetime as _dt


def utc(moment: _dt.datetime) -> _dt.datetime:
    """``moment`` as an aware UTC time; a naive one (SQLite gives back the UTC times it stored naive, an ISO 8601 text
    without an offset) is UTC."""
    return moment.replace(tzinfo=_dt.timezone.utc) if moment.tzinfo is None else moment.astimezone(_dt.timezone.utc)
