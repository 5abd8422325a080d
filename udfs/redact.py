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


# setting names whose values are secrets (librdkafka's sasl.password, ssl.key.password,
# sasl.oauthbearer.client.secret, the registry's basic.auth.user.info, Spark's s3a secret.key, ...)
_SECRET_NAME = re.compile(r"password|secret|token|credential|jaas|user\.?info|private|(^|[._])key($|[._])|pem",
                          re.IGNORECASE)


def is_secret(name: str) -> bool:
    return bool(_SECRET_NAME.search(str(name)))


def redacted_repr(obj) -> str:
    """A dataclass's repr with secrets hidden: values of secret-named settings (in its fields and
    in the mappings it holds, nested dataclasses too) and the userinfo of URLs."""
    from dataclasses import fields, is_dataclass

    def show(name: str, value) -> str:
        if is_secret(name) and value not in (None, "", {}):
            return repr(HIDDEN)
        if is_dataclass(value) and not isinstance(value, type):
            return redacted_repr(value)
        if isinstance(value, dict) or hasattr(value, "items"):
            return "{" + ", ".join(f"{k!r}: {show(k, v)}" for k, v in value.items()) + "}"
        return redact(repr(value))

    return f"{type(obj).__name__}({', '.join(f'{f.name}={show(f.name, getattr(obj, f.name))}' for f in fields(obj) if f.repr)})"
