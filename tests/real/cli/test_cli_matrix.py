"""The CLI contract, checked on every cell of the matrix (cli_matrix.py: every command the parser knows, in each
bad state that matters to it, with and without --json, run as real processes in parallel): never a traceback,
an exit code the README promises (0, 1, 2), under --json exactly one envelope on stdout that validates against
its shipped schema and carries that exit code, every error or warning finding with a fix, a message for a
person whenever it fails, and plain ASCII on a plain-ASCII terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_matrix import INTERRUPTED_CODES, Result, cells, envelopes, read_only_mount_works, run_matrix

from envelope_schemas import schema_errors

CELLS = cells()


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    return run_matrix(tmp_path_factory.mktemp("matrix"), CELLS)


def _result(matrix: dict[str, Result], cell_id: str) -> Result:
    if cell_id not in matrix:
        pytest.skip(f"not run here: a read-only mount needs root and unshare ({read_only_mount_works()=})")
    return matrix[cell_id]


def test_every_command_of_the_parser_is_in_the_matrix() -> None:
    from cli_matrix import commands

    from jitguard.cli import build_parser

    assert {c.command for c in CELLS} == set(commands(build_parser()))
    assert ("doctor",) in {c.command for c in CELLS if c.json}


@pytest.mark.parametrize("cell_id", [c.id for c in CELLS])
def test_the_cli_contract_holds(matrix: dict[str, Result], cell_id: str) -> None:
    r = _result(matrix, cell_id)
    said = r.stdout + r.stderr
    assert r.returncode is not None, f"{cell_id}: still running after the matrix's limit"
    assert "Traceback" not in said, r.stderr[-3000:]
    allowed = INTERRUPTED_CODES if r.cell.state.interrupt_after else (0, 1, 2)
    assert r.returncode in allowed, f"{cell_id}: exit {r.returncode}\n{r.stderr[-2000:]}"
    if r.returncode == 130:
        assert "interrupted" in r.stderr and (not r.cell.json or r.stdout == ""), r.stdout[-2000:]
    if r.returncode in (130, -2):  # -2: the SIGINT landed while Python was already shutting down
        return
    if r.returncode != 0 and not r.cell.state.close_stdout:
        assert said.strip(), f"{cell_id}: exit {r.returncode} and not a word why"
    if r.cell.state.name == "ascii":
        assert r.stdout.isascii(), f"{cell_id}: non-ASCII on an ASCII terminal"
    if not r.cell.json or r.cell.state.close_stdout:
        return
    payload = json.loads(r.stdout)  # the whole of stdout: exactly one JSON document
    assert isinstance(payload, dict) and schema_errors(payload) == [], schema_errors(payload)
    stated = payload.get("exit_code", (payload.get("error") or {}).get("exit_code"))
    if stated is not None:
        assert stated == r.returncode, f"{cell_id}: the envelope says {stated}, the process {r.returncode}"
    if r.returncode == 2:
        assert payload["schema"] == "jitguard.error/1" and payload["error"]["kind"] in ("usage", "config")
    unfixed = [f["code"] for f in envelopes(payload) if f["severity"] != "info" and not f["fixes"]]
    assert unfixed == [], f"{cell_id}: findings without a fix: {unfixed}"


def test_the_committed_table_has_every_cell_of_this_parser() -> None:
    from cli_matrix import TABLE

    text = Path(TABLE).read_text(encoding="utf-8")
    for cell in CELLS:
        row = f"| `{' '.join(cell.command) or 'jitguard'}` | {cell.state.name} |"
        assert row in text, f"regenerate it: python tests/real/cli/cli_matrix.py ({row} is missing)"
