"""The versioned JSON envelope shared by every command, with secrets redacted."""

from __future__ import annotations

import json
from typing import Any

from jitguard.errors import JitguardError
from jitguard.redaction import redact_tree
from jitguard.version import __version__


def envelope(command: str, payload: dict[str, Any], *, version: int = 1) -> dict[str, Any]:
    return redact_tree({"schema": f"jitguard.{command}/{version}", "jitguard": __version__, **payload})


def dumps(command: str, payload: dict[str, Any], *, version: int = 1) -> str:
    return json.dumps(envelope(command, payload, version=version), indent=2, sort_keys=False, default=str)


def error_dumps(error: JitguardError) -> str:
    """The ``jitguard.error/1`` envelope: what a ``--json`` command prints when it fails before its result."""
    payload = {
        "error": {
            "kind": error.kind,
            "message": str(error),
            "exit_code": error.exit_code,
            "findings": [f.to_json() for f in error.findings],
            "log_path": error.log_path,
        }
    }
    return dumps("error", payload)
