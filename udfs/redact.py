"""Credentials never reach a log line, an error message or a repr: URLs may carry them as userinfo
(``https://user:secret@registry``), and exceptions of HTTP clients quote the URL they used."""

from __future__ import annotations

import re

# scheme://userinfo@ : the userinfo is whatever precedes the last @ of the authority
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")
HIDDEN = "***"


def redact(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ***."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}{HIDDEN}@", str(text))


def redact_url(url: str | None) -> str | None:
    return None if url is None else redact(url)
