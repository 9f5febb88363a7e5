"""Secrets out of everything jitguard writes (JSON, text, cached verdicts, build logs): by name and by value.

By name: any variable or key containing TOKEN, KEY, SECRET, PASSWORD or CREDENTIAL. By value, wherever it sits
in a string (a token pasted into CUDA_HOME is a token all the same): real credential shapes, secret
``name=value`` pairs, URL user info and signed-URL parameters, this process's credential values, and long
high-entropy strings. Only the secret part is replaced, so a line keeps its meaning as evidence
(docs/design.md "Secrets", docs/reliability.md).
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from pathlib import PurePath
from typing import Any

REDACTED = "<redacted>"
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|CONNECTION_STRING", re.IGNORECASE)

# A token starts a word, or follows a one-letter flag (-L, -I, -D) it was glued to.
_PREFIXED = re.compile(
    r"(?:(?<![A-Za-z0-9])|(?<=-[A-Za-z]))(?:"
    r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|hf_[A-Za-z0-9]{20,}"
    r"|sk-[A-Za-z0-9_-]{20,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r")(?![A-Za-z0-9])"
)
# Bounded repeats throughout: these run over every line of a build log, and an unbounded name part would make
# a long run of word characters cost quadratic time.
_PAIR = re.compile(
    r"(?i)(?<![A-Za-z0-9])([A-Za-z0-9_.-]{0,40}(?:token|key|secret|passw(?:or)?d|credential)[A-Za-z0-9_.-]{0,40}"
    r"\s{0,3}=\s{0,3})(\"[^\"]*\"|'[^']*'|[^\s&;,'\"]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer\s{1,3})[A-Za-z0-9._~+/=-]{16,}")
# User info: a user name (no '/'), then optionally ':' and a password that may hold '/', ':' or '@'; the
# match ends at the last '@' followed by a host name.
_URL_USERINFO = re.compile(
    r"(?i)\b([a-z][a-z0-9+.-]{0,20}://)(?!/)([^\s/:@'\"<>]{0,200}(?::[^\s'\"<>]{0,400})?)@"
    r"(?=[A-Za-z0-9.\[\]-]{1,255}(?:[:/?#\s'\"<>)]|$))"
)
_SIGNED_QUERY = re.compile(
    r"(?i)([?&][A-Za-z0-9_.-]{0,40}(?:signature|sig|token|credential|key|secret|policy)=)[^&\s'\"#<>]+"
)
_MIN_VARIABLE_SECRET = 6
# Variables whose name says KEY but whose value is public (public keys), and values that are a path (a key
# *file*, GOOGLE_APPLICATION_CREDENTIALS): neither is the secret itself.
_PUBLIC_VARIABLES = frozenset({"JITGUARD_TRUSTED_KEYS"})
_PATH_STARTS = ("/", "~/", "./", "../")
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/=]{32,}")
_MIN_RANDOM = 32
_MAX_SLASHES = 2
# Bits per character: random base62/base64 text of 32+ characters scores 4.2 or more (99 in 100 do).
_MIN_ENTROPY = 4.2
# CamelCase identifiers (kernel and class names) score as high; they are told apart by their words: runs of
# four lower-case letters or more cover half of such a name or more, and less than 0.45 of 95 in 100 random
# strings.
_WORD = re.compile(r"[a-z]{4,}|[A-Z][a-z]{3,}")
_MAX_WORDINESS = 0.45


def redact_text(text: str) -> str:
    """``text`` with every secret-shaped value replaced by ``<redacted>``."""
    if len(text) < 16 and "=" not in text:  # only a name=value pair is that short, and most strings are
        return text
    # A URL's user info first: a key inside it must not be cut out of it before the whole is found.
    text = _URL_USERINFO.sub(lambda m: m.group(1) + (m.group(2) and REDACTED) + "@", text)
    text = _PREFIXED.sub(REDACTED, text)
    text = _PAIR.sub(lambda m: m.group(1) + (m.group(2) if m.group(2) == REDACTED else REDACTED), text)
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    text = _SIGNED_QUERY.sub(lambda m: m.group(1) + REDACTED, text)
    for value in _variable_secrets():
        text = text.replace(value, REDACTED)
    return _BASE64_RUN.sub(_random_run, text)


def redact_url(url: str) -> str:
    """A store URL fit for a log line: no user info, no signature parameters, no credential's value."""
    return redact_text(url) if len(url) >= 16 else _URL_USERINFO.sub(r"\1<redacted>@", url)


def _variable_secrets() -> list[str]:
    """The values of this process's credential variables, longest first (one inside another is replaced
    whole). Read at each call: a credential set after import is a credential too."""
    found = {
        value
        for name, value in os.environ.items()
        if len(value) >= _MIN_VARIABLE_SECRET
        and SECRET_NAME.search(name)
        and name not in _PUBLIC_VARIABLES
        and not value.startswith(_PATH_STARTS)
        and value != REDACTED
    }
    return sorted(found, key=len, reverse=True)


def redact_bytes(data: bytes) -> bytes:
    """``redact_text`` for raw output, every byte that is not part of a secret kept as it was."""
    return redact_text(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


def redact_value(name: str, value: str) -> str:
    """One variable: all of it when its name says secret, else its secret-shaped parts."""
    return REDACTED if SECRET_NAME.search(name) else redact_text(value)


def redact_tree(value: Any, *, names: bool = True) -> Any:
    """A JSON-ready structure with every secret-shaped part of every string replaced, keys included, and
    with ``names`` every value under a secret-named key too (jitguard's own records turn ``names`` off: their
    fields, such as a cache ``key``, are not variables)."""
    if isinstance(value, dict):
        return {
            (redact_text(k) if isinstance(k, str) else k): (
                REDACTED
                if names and isinstance(k, str) and SECRET_NAME.search(k)
                else redact_tree(v, names=names)
            )
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_tree(v, names=names) for v in value]
    if isinstance(value, (str, PurePath)):  # a path is written as its text (json's default=str)
        return redact_text(str(value))
    return value


class RedactingWriter:
    """A text stream that redacts what is written through it: the console of every command writes through
    one (rich writes each printed block in one call, so a secret is never split between two writes)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact_text(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, encoding, fileno: the stream's own
        return getattr(self._stream, name)


def _random_run(match: re.Match[str]) -> str:
    run = match.group(0)
    start = match.start()
    if run.startswith("Z") and start > 0 and match.string[start - 1] == "_":
        return run  # an Itanium C++ mangled name (_ZN...), as linkers print them
    # A base64 secret may hold a few slashes, and may sit in a path: judge every run of up to three
    # components (a path's own components are words, or too short).
    parts = run.split("/")
    secret = [False] * len(parts)
    for first in range(len(parts)):
        for last in range(first, min(len(parts), first + _MAX_SLASHES + 1)):
            if _looks_random("/".join(parts[first : last + 1])):
                secret[first : last + 1] = [True] * (last + 1 - first)
    out: list[str] = []
    for part, hidden in zip(parts, secret, strict=True):
        if not hidden:
            out.append(part)
        elif not out or out[-1] != REDACTED:
            out.append(REDACTED)
    return "/".join(out)


def _looks_random(text: str) -> bool:
    letters = text.replace("/", "")
    if len(letters) < _MIN_RANDOM:
        return False
    if not (any(c.isupper() for c in letters) and any(c.islower() for c in letters)):
        return False
    if not any(c.isdigit() for c in letters):
        return False
    counts = Counter(letters)
    entropy = -sum(n / len(letters) * math.log2(n / len(letters)) for n in counts.values())
    if entropy < _MIN_ENTROPY:
        return False
    return sum(len(word) for word in _WORD.findall(letters)) / len(letters) < _MAX_WORDINESS
