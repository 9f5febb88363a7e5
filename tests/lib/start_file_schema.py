"""Validation of the start ledger's file (``jitguard.start/1``, a document, not a command's envelope)."""

from __future__ import annotations

from typing import Any

import jsonschema

from jitguard.report.schemas import schema_for


def file_schema_errors(payload: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema_for("jitguard.start/1"))
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(payload)]
