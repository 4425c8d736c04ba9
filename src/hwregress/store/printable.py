"""Text read from a file shown on one line of a terminal: a session's name, a start time or a test id from a
results.json, a history or a journal someone may have edited. Such text with a control character (a newline, a
carriage return, an escape sequence) is shown as its Python ``repr``, so that it can neither break the line it is in
(and forge another) nor recolour or clear the terminal; any other text is shown as it is, unquoted."""

from __future__ import annotations


def one_line(text: object) -> str:
    """``str(text)`` where every character of it is printable (``str.isprintable``: the space counts, a newline,
    tab, escape or other control or separator character does not), else its ``repr`` (``'vm-1\\nforged'``)."""
    shown = str(text)
    return shown if shown.isprintable() else repr(shown)
