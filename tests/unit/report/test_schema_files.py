"""The shipped JSON Schemas: one per envelope the CLI prints, each a valid draft 2020-12 schema that stands
alone, with the shapes they share (finding, decision, build result) written the same way in every file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

import jitguard.cli
from jitguard.report.schemas import DIALECT, file_name, schema_for, schema_ids

CLI_DIR = Path(jitguard.cli.__file__).parent


def envelopes_the_cli_prints() -> set[str]:
    """Every schema id the CLI modules write: ``dumps("cache", ...)``, ``COMMAND = "build.ninja"``, errors."""
    names = {"error"}
    for module in CLI_DIR.glob("*.py"):
        text = module.read_text()
        names |= set(re.findall(r'dumps\(\s*"([a-z.-]+)"', text))
        names |= set(re.findall(r'^COMMAND = "([a-z.-]+)"', text, re.MULTILINE))
    return {f"jitguard.{name}/1" for name in names}


def test_every_envelope_the_cli_prints_has_a_schema() -> None:
    printed = envelopes_the_cli_prints()
    assert {"jitguard.doctor/1", "jitguard.build.ninja/1", "jitguard.gdn.run/1"} <= printed
    assert printed <= set(schema_ids())


@pytest.mark.parametrize("schema_id", schema_ids())
def test_each_schema_is_valid_draft_2020_12_and_names_its_envelope(schema_id: str) -> None:
    schema = schema_for(schema_id)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == DIALECT
    assert schema["$id"] == f"urn:jitguard:schema:{schema_id}"
    assert f'"const": "{schema_id}"' in json.dumps(schema)  # the envelope's own "schema" field


@pytest.mark.parametrize("schema_id", schema_ids())
def test_each_schema_stands_alone(schema_id: str) -> None:
    """Only local references, so any validator can use the file without fetching another."""
    refs = re.findall(r'"\$ref": "([^"]*)"', json.dumps(schema_for(schema_id)))
    assert refs and all(ref.startswith("#/$defs/") for ref in refs)


def test_shared_definitions_are_identical_in_every_file() -> None:
    seen: dict[str, tuple[str, object]] = {}
    for schema_id in schema_ids():
        for name, definition in schema_for(schema_id).get("$defs", {}).items():
            first_id, first = seen.setdefault(name, (schema_id, definition))
            assert definition == first, f"$defs/{name} differs between {first_id} and {schema_id}"
    assert {"finding", "decision", "buildResult", "failedBuild"} <= set(seen)


def test_file_names_follow_the_schema_id() -> None:
    assert file_name("jitguard.build.flashinfer-gdn/1") == "jitguard.build.flashinfer-gdn-1.json"
    assert "jitguard.build.flashinfer-gdn/1" in schema_ids()


def test_an_unknown_schema_id_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"jitguard\.doctor/1"):
        schema_for("jitguard.doctor/9")
