"""Real ninja projects and real misbehaving processes for the fault matrix.

- ``write_shared_project``: two objects and a link step, each a real process that writes its output in pieces
  (as a compiler does: a reader in between sees a short file), journals who ran it for which build, and notes
  an OVERLAP when another live process is writing the same output at the same time. The link step fails
  like ld does ("file too short") when an object is incomplete. While a file ``hold`` exists in the project,
  a compile waits before writing (the test holds a build mid-way).
- ``write_stubborn_project``: one compile that ignores SIGTERM and, optionally, leaves a grandchild that
  double-forks, calls ``setsid`` (out of the session and the process group) and ignores SIGTERM too. Both
  write their pids, then sleep silently (no output, no CPU: a hang).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PIECE = "x" * 4096
PIECES = 8

COMPILE = r"""
import os, sys, time
out, journal, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
owner = os.environ.get("JITGUARD_BUILD_OWNER", "none").split(":")[0]
def log(event):
    with open(journal, "a") as fh:
        fh.write(f"{event} {owner} {os.getpid()} {os.path.basename(out)}\n")
marker = out + ".writing"
try:
    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
except FileExistsError:
    other = int(open(marker).read() or 0)
    try:
        os.kill(other, 0)
        alive = open(f"/proc/{other}/stat").read().split(")")[-1].split()[0] not in "ZX"
    except (OSError, ValueError):
        alive = False
    if alive:
        log("OVERLAP")
    open(marker, "w").write(str(os.getpid()))
log("start")
hold, t0 = os.path.join(os.path.dirname(os.path.abspath(out)), "hold"), time.time()
while os.path.exists(hold) and time.time() < t0 + 120:  # the test holds the build here while it looks
    time.sleep(0.05)
with open(out, "w") as fh:  # in pieces, like a compiler: a concurrent reader sees a short file
    for _ in range(PIECES):
        fh.write(PIECE)
        fh.flush()
        time.sleep(delay / PIECES)
    fh.write("END\n")
os.unlink(marker)
log("end")
""".replace("PIECES", str(PIECES)).replace("PIECE", repr(PIECE))

LINK = r"""
import os, sys
out, journal, objects = sys.argv[1], sys.argv[2], sys.argv[3:]
owner = os.environ.get("JITGUARD_BUILD_OWNER", "none").split(":")[0]
with open(journal, "a") as fh:
    fh.write(f"start {owner} {os.getpid()} {os.path.basename(out)}\n")
for obj in objects:
    text = open(obj).read()
    if not text.endswith("END\n"):
        sys.exit(f"ld: {obj}: file too short")
with open(out, "w") as fh:
    fh.write("linked " + " ".join(objects) + "\n")
with open(journal, "a") as fh:
    fh.write(f"end {owner} {os.getpid()} {os.path.basename(out)}\n")
"""

STUBBORN = r"""
import os, signal, sys, time
pids, escape = sys.argv[1], sys.argv[2] == "escape"
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if escape and os.fork() == 0:
    os.setsid()  # out of ninja's process group and the build's session
    if os.fork() == 0:
        with open(pids, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        time.sleep(300)
    os._exit(0)
with open(pids, "a") as fh:
    fh.write(f"{os.getpid()}\n")
time.sleep(300)
"""

OUTPUTS = ("a.o", "b.o", "app")


@dataclass
class SharedProject:
    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / "build.ninja"

    @property
    def journal(self) -> Path:
        return self.root / "journal.txt"

    @property
    def hold(self) -> Path:
        return self.root / "hold"

    def clean(self) -> None:
        """Remove the outputs (ninja's log stays): the next build has all three steps to run."""
        for name in OUTPUTS:
            with contextlib.suppress(FileNotFoundError):
                (self.root / name).unlink()

    def events(self, since: int = 0) -> list[tuple[str, int, int, str]]:
        """(event, owner pid, pid, output) journal lines from byte offset ``since``."""
        if not self.journal.exists():
            return []
        with open(self.journal) as fh:
            fh.seek(since)
            text = fh.read()
        rows = []
        for line in text.splitlines():
            event, owner, pid, out = line.split()
            rows.append((event, int(owner) if owner.isdigit() else 0, int(pid), out))
        return rows

    def journal_size(self) -> int:
        return self.journal.stat().st_size if self.journal.exists() else 0

    def built(self) -> bool:
        return all((self.root / name).exists() for name in OUTPUTS) and all(
            (self.root / name).read_text().endswith("END\n") for name in ("a.o", "b.o")
        )


def write_shared_project(root: Path, *, delay: float = 0.1) -> SharedProject:
    root.mkdir(parents=True, exist_ok=True)
    (root / "compile.py").write_text(COMPILE)
    (root / "link.py").write_text(LINK)
    journal = root / "journal.txt"
    (root / "build.ninja").write_text(
        f"rule compile\n  command = {sys.executable} compile.py $out {journal} {delay}\n"
        f"rule link\n  command = {sys.executable} link.py $out {journal} $in\n"
        "build a.o: compile a.c\nbuild b.o: compile b.c\nbuild app: link a.o b.o\ndefault app\n"
    )
    for source in ("a.c", "b.c"):
        (root / source).write_text("int x;\n")
    return SharedProject(root)


def write_stubborn_project(root: Path, *, escape: bool) -> Path:
    """A project whose only compile ignores SIGTERM (and, with ``escape``, leaves a setsid'd grandchild);
    returns the file where they write their pids."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "stubborn.py").write_text(STUBBORN)
    pids = root / "stubborn.pids"
    mode = "escape" if escape else "stay"
    (root / "build.ninja").write_text(
        f"rule stubborn\n  command = {sys.executable} stubborn.py {pids} {mode}\nbuild stuck.o: stubborn\n"
    )
    return pids


def cli_build(
    manifest: Path, *flags: str, env: dict[str, str] | None = None, stderr: Path | None = None
) -> subprocess.Popen[str]:
    """A real `jitguard build ninja MANIFEST` process (its stderr to a file, or piped)."""
    argv = [sys.executable, "-m", "jitguard.cli", "build", "ninja", str(manifest), *flags]
    full_env = {**os.environ, **(env or {})}
    if stderr is None:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env)
    with open(stderr, "w") as err:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=full_env)
