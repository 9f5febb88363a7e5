"""The words that tell the runner a compile job died for lack of memory (from real tools' messages)."""

from __future__ import annotations

from jitguard.supervise.launcher import KILLED_MARKER
from jitguard.supervise.oom import text_evidence


def test_compiler_kill_and_allocation_messages_are_oom_evidence() -> None:
    log = "\n".join(
        [
            "[3/34] nvcc -c a.cu",
            "nvcc error   : 'cicc' died due to signal 9 (Kill signal)",
            "c++: fatal error: Killed signal terminated program cc1plus",
            f"{KILLED_MARKER} 9 (SIGKILL) (usually the out-of-memory killer): ptxas x.ptx",
            "LLVM ERROR: out of memory",
        ]
    )
    assert len(text_evidence(log)) == 4


def test_ordinary_compile_errors_are_not_oom_evidence() -> None:
    log = 'a.cu(3): error: identifier "x" is undefined\n' + f"{KILLED_MARKER} 15 (SIGTERM): nvcc\n"
    assert text_evidence(log) == []
