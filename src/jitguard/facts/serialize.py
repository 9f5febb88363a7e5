"""Facts as plain JSON-ready data (paths and tuples become strings and lists)."""

from __future__ import annotations

import dataclasses
from enum import Enum
from pathlib import PurePath
from typing import Any

from jitguard.facts import Unavailable


def to_plain(value: Any) -> Any:
    if isinstance(value, Unavailable):
        return {"unavailable": value._jitguard_error}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_plain(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    return value


def facts_to_json(facts: Any) -> dict[str, Any]:
    plain = to_plain(facts)
    assert isinstance(plain, dict)
    return plain
