"""Validation of `--json` envelopes against the schemas jitguard ships, shared by the unit and real tests."""

from __future__ import annotations

from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from jitguard.report.schemas import schema_for


def schema_errors(payload: dict[str, Any]) -> list[str]:
    """Every way ``payload`` breaks the schema its own ``"schema"`` field names, as 'path: message' lines
    (inside a oneOf, the message of the branch that came closest)."""
    validator = jsonschema.Draft202012Validator(schema_for(payload["schema"]))
    best = (best_match([error]) for error in validator.iter_errors(payload))
    return [f"{e.json_path}: {e.message}" for e in best if e is not None]


def assert_valid(payload: dict[str, Any]) -> None:
    errors = schema_errors(payload)
    assert errors == [], "\n".join(errors)


def assert_rejected(payload: dict[str, Any]) -> None:
    assert schema_errors(payload), f"the {payload['schema']} schema accepts a broken payload"
