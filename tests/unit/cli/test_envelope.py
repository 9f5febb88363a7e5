"""The JSON envelope: versioned schema, jitguard version, secrets redacted at any depth."""

from __future__ import annotations

import json

from jitguard import __version__
from jitguard.cli.envelope import dumps
from jitguard.redaction import REDACTED


def test_envelope_has_schema_and_version() -> None:
    data = json.loads(dumps("doctor", {"x": 1}))
    assert data["schema"] == "jitguard.doctor/1"
    assert data["jitguard"] == __version__
    assert data["x"] == 1


def test_secret_names_are_redacted_at_any_depth() -> None:
    payload = {
        "facts": {
            "environment": {
                "HF_TOKEN": "hf_abc",
                "AWS_SECRET_ACCESS_KEY": "s",
                "CUDA_HOME": "/cuda",
                "nested": [{"db_password": "p"}],
            }
        }
    }
    text = dumps("doctor", payload)
    assert "hf_abc" not in text and '"s"' not in text and '"p"' not in text
    env = json.loads(text)["facts"]["environment"]
    assert env["HF_TOKEN"] == REDACTED and env["CUDA_HOME"] == "/cuda"
