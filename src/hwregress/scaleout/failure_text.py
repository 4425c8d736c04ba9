"""What a failed or stalled job's message says: for each rank, how it ended, the phase it was in, its error and
its last output lines (the elastic agent's per-rank log files; after a stall, the stack it dumped there)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from hwregress.process_group import log_tail
from hwregress.scaleout.job import JobSpec

TAIL_LINES = 15
STACK_FRAMES = 8


def describe_failures(spec: JobSpec, failures: list[dict[str, Any]], statuses: dict[int, dict[str, Any]]) -> str:
    """One paragraph per failed rank, the rank that died first (killed, or failed without a peer to blame)
    first: ``rank 1 (node 0, local rank 1) exited with code -9 (SIGKILL) during 'timed round 2 of 10'``, its
    error and its last output lines."""
    def died_first(failure: dict[str, Any]) -> tuple[int, int]:
        status = statuses.get(failure["rank"], {})
        killed = status.get("phase") not in ("failed", "oom")  # no Python error of its own: it was killed
        return (0 if killed else 1, failure["rank"])

    paragraphs = []
    for failure in sorted(failures, key=died_first):
        rank = failure["rank"]
        status = statuses.get(rank, {})
        how = f"exit code {failure['exitcode']}" + (f" ({failure['signal']})" if failure.get("signal") else "")
        where = status.get("phase", "before its first report")
        text = (f"rank {rank} (node {status.get('node_rank', '?')}, local rank {failure.get('local_rank')}) exited "
                f"with {how} during '{where}'")
        if status.get("error"):
            text += f": {status['error']}"
        paragraphs.append(text + "\n" + _rank_tail(spec, failure.get("local_rank", rank)))
    return "\n".join(paragraphs)


def describe_ranks(spec: JobSpec, statuses: dict[int, dict[str, Any]], ranks: list[int]) -> str:
    """Where each of ``ranks`` was: its last phase and how long ago, the innermost frames of the stack it dumped
    (:func:`hwregress.scaleout.launch.dump_stacks`), and its last output lines before that."""
    now = time.time()
    parts = []
    for rank in ranks:
        status = statuses.get(rank, {})
        local_rank = status.get("local_rank", rank)
        stack, before = split_stack_dump(_log_text(spec, local_rank, "stderr.log"))
        frames = "\n".join(f"    {line.strip()}" for line in stack) or "    (no stack dumped)"
        parts.append(f"rank {rank} (pid {status.get('pid')}, {status.get('device')}): last at '{status.get('phase')}' "
                     f"{now - float(status.get('time', now)):.0f} s ago; its stack, innermost first:\n{frames}\n"
                     + "\n".join(f"  [stderr] {line}" for line in before[-5:]))
    return "\n".join(parts)


def split_stack_dump(text: str, frames: int = STACK_FRAMES) -> tuple[list[str], list[str]]:
    """The innermost ``frames`` frames of the last thread ``faulthandler`` dumped in ``text`` (the main thread: it
    is dumped last) and the non-empty lines before the dump. No dump: ``([], last lines)``."""
    lines = [line for line in text.splitlines() if line.strip()]
    headers = [i for i, line in enumerate(lines) if line.rstrip().endswith("(most recent call first):")]
    if not headers:
        return [], lines
    block = [line for line in lines[headers[-1] + 1:] if line.lstrip().startswith("File ")]
    return block[:frames], lines[:headers[0]]


def _rank_tail(spec: JobSpec, local_rank: int) -> str:
    """The last output lines of a local rank (stderr, then stdout), from the elastic agent's log files."""
    lines: list[str] = []
    for name in ("stderr.log", "stdout.log"):
        text = _log_text(spec, local_rank, name)
        lines += [f"  [{name[:6]}] {line}" for line in text.splitlines() if line.strip()][-TAIL_LINES:]
    return "\n".join(lines) if lines else "  (no output)"


def _log_text(spec: JobSpec, local_rank: int, name: str) -> str:
    """A local rank's ``stderr.log`` or ``stdout.log`` (the elastic agent writes them per attempt), "" if none."""
    texts = []
    for path in sorted(Path(spec.out_dir, "logs").glob(f"*/attempt_*/{local_rank}/{name}")):
        try:
            texts.append(path.read_text(errors="replace"))
        except OSError:
            continue
    return "\n".join(texts)


def driver_tail(spec: JobSpec) -> str:
    lines = log_tail(Path(spec.out_dir) / "driver.log", TAIL_LINES)
    return ("launcher output:\n" + "\n".join(f"  {line}" for line in lines) if lines
            else "(the launcher printed nothing)")

