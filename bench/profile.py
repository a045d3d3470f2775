"""Sampling profiles of benchmark child processes with py-spy (``pip install py-spy``).

:class:`PySpy` attaches ``py-spy record --format raw --gil`` to a PID: only the thread
holding the GIL is sampled, so the shares are of Python CPU time, not of waiting.
:func:`summary` turns the collapsed stacks into two short tables: the functions where
samples land (self) and the functions on the stack (inclusive).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path


def py_spy_path() -> str | None:
    """The py-spy executable next to this interpreter or on PATH, or ``None``."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


class PySpy:
    """``py-spy record`` on ``pid`` until :meth:`stop`; the raw stacks go to ``out``."""

    def __init__(self, *, pid: int, out: Path, rate: int = 100) -> None:
        exe = py_spy_path()
        if exe is None:
            raise RuntimeError("py-spy is not installed: .venv/bin/pip install py-spy")
        self.out = out
        self._log = out.with_suffix(".log").open("wb")
        self._popen = subprocess.Popen(
            [
                *(exe, "record", "--pid", str(pid), "--rate", str(rate)),
                *("--format", "raw", "--output", str(out), "--nonblocking", "--gil"),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        """Stop sampling (SIGINT makes py-spy write its output) and wait for it."""
        if self._popen.poll() is None:
            self._popen.send_signal(signal.SIGINT)
            try:
                self._popen.wait(30)
            except subprocess.TimeoutExpired:
                self._popen.kill()
                self._popen.wait(5)
        self._log.close()


def _frame_name(frame: str) -> str:
    # py-spy raw frames look like "select (app/core/nodeipam.py:224)"; keep "file:function".
    name, _, where = frame.partition(" (")
    path = where.split(":")[0]
    short = "/".join(path.split("/")[-2:])
    return f"{short}:{name}"


def summary(out: Path, *, top: int = 15) -> str:
    """Top ``top`` functions by self samples and by inclusive samples, as text."""
    if not out.exists():
        return f"(no profile written to {out})"
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in out.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(f) for f in stack.split(";") if not f.startswith("process ")]
        frames = [f for f in frames if not f.startswith("thread ")] or frames
        total += count
        if frames:
            own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    if not total:
        return "(empty profile)"
    lines = [f"py-spy: {total} samples (active threads); self / inclusive share:"]
    lines.append("  self:")
    lines += [f"    {n / total:6.1%}  {name}" for name, n in own.most_common(top)]
    # Frames on (nearly) every stack (thread bootstrap, event loop, CLI) say nothing.
    telling = [(name, n) for name, n in inclusive.most_common() if n < 0.8 * total]
    lines.append("  inclusive (frames on fewer than 80% of the samples):")
    lines += [f"    {n / total:6.1%}  {name}" for name, n in telling[:top]]
    return "\n".join(lines)
