"""The JSON Schemas (draft 2020-12) of every ``--json`` envelope, shipped beside this module: one file per
envelope schema id, ``jitguard.doctor/1`` in ``jitguard.doctor-1.json``. docs/json.md says how to validate.

Each file stands alone (its ``$defs`` repeat the shared shapes: finding, decision, build result), so a user can
validate with any tool without resolving references; a test keeps the repeated definitions identical.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def file_name(schema_id: str) -> str:
    """``jitguard.doctor/1`` -> ``jitguard.doctor-1.json`` (a ``/`` cannot stand in a file name)."""
    return schema_id.replace("/", "-") + ".json"


def schema_ids() -> tuple[str, ...]:
    """The id of every shipped schema, e.g. ``jitguard.doctor/1``, sorted."""
    names = (entry.name for entry in resources.files(__name__).iterdir() if entry.name.endswith(".json"))
    return tuple(sorted(_schema_id(name) for name in names))


def _schema_id(name: str) -> str:
    envelope, _, version = name.removesuffix(".json").rpartition("-")
    return f"{envelope}/{version}"


def schema_for(schema_id: str) -> dict[str, Any]:
    """The schema of the envelope whose ``"schema"`` field is ``schema_id`` (e.g. ``jitguard.doctor/1``).

    Raises ``KeyError`` naming the known ids for an id jitguard ships no schema for."""
    resource = resources.files(__name__) / file_name(schema_id)
    if not resource.is_file():
        raise KeyError(f"no JSON schema for {schema_id!r}; jitguard ships {', '.join(schema_ids())}")
    schema: dict[str, Any] = json.loads(resource.read_text(encoding="utf-8"))
    return schema
