"""The wrapped manifest: every rule command runs behind the slot launcher, nothing else changes."""

from __future__ import annotations

from jitguard.supervise.manifest import LAUNCH_VARIABLE, launcher_prefix, wrap_commands

FLASHINFER_STYLE = """ninja_required_version = 1.3
nvcc = /usr/local/cuda/bin/nvcc
cxx = c++
cuda_cflags = -O3 $
    -std=c++20

rule cuda_compile
  command = $nvcc --generate-dependencies-with-compile --dependency-output $out.d $cuda_cflags -c $in -o $out
  depfile = $out.d
  deps = gcc

rule link
  command = $cxx $in $ldflags -o $out

build /w/a.cuda.o: cuda_compile /w/a.cu
  command = not-a-rule-binding
build /w/m.so: link /w/a.cuda.o
default /w/m.so
"""


def test_every_rule_command_is_prefixed_and_counted() -> None:
    text, wrapped = wrap_commands(FLASHINFER_STYLE, ["/py", "-m", "jitguard.supervise.launcher", "--"])
    assert wrapped == 2
    assert f"  command = ${LAUNCH_VARIABLE} $nvcc --generate-dependencies-with-compile" in text
    assert f"  command = ${LAUNCH_VARIABLE} $cxx $in $ldflags -o $out" in text
    assert text.splitlines()[-1] == f"{LAUNCH_VARIABLE} = /py -m jitguard.supervise.launcher --"


def test_every_line_of_the_users_file_keeps_its_number_in_the_wrapped_copy() -> None:
    # ninja reports a line number of the file it reads: an error in the copy must point at the user's line.
    text, _ = wrap_commands(FLASHINFER_STYLE, ["py", "--"])
    original, wrapped = FLASHINFER_STYLE.splitlines(), text.splitlines()
    for number, line in enumerate(original):
        assert wrapped[number] == line or (
            "command =" in line and wrapped[number].endswith(line.split("= ", 1)[1])
        )


def test_bindings_outside_rule_blocks_and_continuations_are_untouched() -> None:
    text, _ = wrap_commands(FLASHINFER_STYLE, ["py", "--"])
    assert "  command = not-a-rule-binding" in text
    assert "cuda_cflags = -O3 $\n    -std=c++20" in text
    original_lines = [line for line in FLASHINFER_STYLE.splitlines() if "command =" not in line]
    assert all(line in text.splitlines() for line in original_lines)


def test_prefix_with_spaces_and_dollars_is_quoted_and_escaped() -> None:
    text, _ = wrap_commands("rule r\n  command = touch $out\n", ["/opt/my env/py$1", "--"])
    assert text.splitlines()[-1] == f"{LAUNCH_VARIABLE} = '/opt/my env/py$$1' --"


def test_launcher_prefix_has_no_per_build_arguments() -> None:
    # Slots directory and count travel in the environment: the command line (ninja's hash) never varies.
    assert launcher_prefix(python="/py") == ["/py", "-m", "jitguard.supervise.launcher", "--"]
