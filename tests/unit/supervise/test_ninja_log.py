"""ninja's command hashes, checked against values real ninja binaries wrote to their .ninja_log."""

from __future__ import annotations

from pathlib import Path

from jitguard.supervise.ninja_log import command_hash, latest_entries, translate

# (command, hash in a v5 log written by ninja 1.11.1, hash in a v7 log written by ninja 1.13.2)
WRITTEN_BY_NINJA = [
    (":  ", 0x1AB5660ABB4432C4, 0x23EB4255A7EE54C2),
    ("true #xxx", 0x7B4A8D3249376A09, 0x503A9BE3B102B511),
    ("true #" + "x" * 11, 0xA3972BBF13E102F5, 0xB8BFCD8CBE219670),
    ("true #" + "x" * 54, 0x8DA16F91096FF6FB, 0x943E252CC1FB3817),
    ("true #" + "x" * 139, 0x39F62F5D9157FE7B, 0xC98FF3AB2F0FAA9E),
]


def test_hashes_match_what_ninja_writes_for_log_versions_5_6_and_7() -> None:
    for command, murmur, rapid in WRITTEN_BY_NINJA:
        assert command_hash(command, 5) == murmur
        assert command_hash(command, 6) == murmur
        assert command_hash(command, 7) == rapid
    assert command_hash("anything", 4) is None


def test_translate_appends_an_entry_for_the_other_command(tmp_path: Path) -> None:
    log = tmp_path / ".ninja_log"
    wrapped, plain = "launch -- cc -c a.c -o a.o", "cc -c a.c -o a.o"
    log.write_text(f"# ninja log v7\n1\t20\t123456\ta.o\t{command_hash(wrapped, 7):x}\n")

    added = translate(log, {("a.c", "a.o"): wrapped}, {("a.c", "a.o"): plain})

    assert added == 1
    assert latest_entries(log)["a.o"] == ("1", "20", "123456", command_hash(plain, 7))


def test_translate_leaves_unknown_log_versions_alone(tmp_path: Path) -> None:
    log = tmp_path / ".ninja_log"
    log.write_text("# ninja log v99\n1\t2\t3\ta.o\tabc\n")
    assert translate(log, {("a.c", "a.o"): "x"}, {("a.c", "a.o"): "y"}) == 0
    assert log.read_text() == "# ninja log v99\n1\t2\t3\ta.o\tabc\n"
