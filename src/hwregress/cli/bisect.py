"""``python -m hwregress bisect`` (``--stacks PY1,PY2,...``, ``--repo PATH --good REV --bad REV [--setup CMD]`` or
``--env-steps FILE``) ``[-- PYTEST ARGS]``: which candidate of an ordered list (interpreters, commits, environment
settings; the first known good, the last known bad) first made the selected tests slower (:mod:`hwregress.bisect`,
docs/bisect.md). Each probe is an A/B session of the selection run by the endpoint's interpreter, the endpoint as
stack A and the candidate as stack B, each stack's workers started through its own interpreter (every stack needs
hwregress and the selection's packages).

Over commits, each probed commit is checked out in a worktree of a temporary folder (the checkout is never touched)
and ``--setup CMD`` builds its stack there: ``{worktree}`` is the checked-out folder, ``{stack}`` an empty folder for
the stack and ``{python}`` (``{stack}/bin/python``) where CMD must leave the stack's interpreter (a venv's, or an
executable wrapper). Without ``--setup``: this interpreter with the worktree on PYTHONPATH. Stacks are built once per
commit; a commit that does not build is skipped, as ``git bisect skip``. Worktrees and stacks are removed at the end,
on Ctrl-C too.

Prints each probe as it ends, then the culprit (or why there is none), and writes ``--json``. Exit status: 0 culprit
found, 1 no regression between the endpoints, 2 usage error, 3 undecided within the probes' budget (or only skipped
candidates left where the culprit is), 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hwregress.bisect.budget import DEFAULT_LOOKS, DEFAULT_THRESHOLD
from hwregress.bisect.commits import repository_root
from hwregress.bisect.ladders import Ladder, commits_ladder, env_steps_ladder, stacks_ladder
from hwregress.bisect.search import Bisection, CandidateSkipped, Probe, ProbeOutcome, bisect_in_rounds
from hwregress.bisect.sides import Side, side_of
from hwregress.bisect.stacks import ProbeSettings, StackProbes
from hwregress.bisect.store_record import StoreRecord
from hwregress.cli.common import CliError, command_inputs, fraction, output_path, write_output
from hwregress.report.bisect_view import render_bisection
from hwregress.store.metrics import finite_number
from hwregress.store.printable import one_line
from hwregress.store.store_errors import NoStoreUrl

INTERRUPTED = 130  # the shell's status of a command ended by SIGINT


def add_commands(commands: Any) -> None:
    """Add ``bisect`` to the top-level subcommands (``add_subparsers()``'s object)."""
    parser = commands.add_parser("bisect", help="which commit, stack or setting of an ordered list first made the "
                                 "tests slower", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ladder = parser.add_mutually_exclusive_group(required=True)
    ladder.add_argument("--stacks", help="the interpreters in order, comma-separated: the first known good, the last "
                                         "known bad")
    ladder.add_argument("--repo", help="the git repository whose commits to bisect (with --good and --bad)")
    ladder.add_argument("--env-steps", help="a file of one line of KEY=VALUE settings per step, the good first")
    parser.add_argument("--good", help="with --repo: the known good commit")
    parser.add_argument("--bad", help="with --repo: the known bad commit (default HEAD)")
    parser.add_argument("-n", type=int, default=1, help="probes at once, each on a GPU of its own (default 1: one "
                                                        "probe at a time, on whatever the selection uses)")
    parser.add_argument("--store", default=None, metavar="URL", help="the fleet store that keeps the bisection, "
                        "probe by probe (default: HWREGRESS_STORE, else sqlite:///reports/hwregress.sqlite; none: "
                        "not kept)")
    parser.add_argument("--devices", default=None, help="with -n: the GPUs to run probes on, as CUDA_VISIBLE_DEVICES "
                        "names them, comma-separated (default: CUDA_VISIBLE_DEVICES, else every GPU nvidia-smi lists)")
    add_probe_options(parser)
    parser.set_defaults(handler=run)


def add_probe_options(parser: argparse.ArgumentParser) -> None:
    """The options every probe takes (``bisect`` and ``bisect-step``): --setup, --threshold, --looks, --work-dir,
    --probe-timeout, --json and the pytest selection after ``--``."""
    parser.add_argument("--setup", default=None,
                        help="the shell command that builds a commit's stack: {worktree}, {stack} and {python} are "
                             "replaced (default: this interpreter with the worktree on PYTHONPATH)")
    parser.add_argument("--threshold", type=fraction, default=DEFAULT_THRESHOLD,
                        help=f"the smallest slowdown looked for, a fraction (default {DEFAULT_THRESHOLD})")
    parser.add_argument("--looks", default=",".join(str(n) for n in DEFAULT_LOOKS),
                        help="each probe's planned looks, cumulative pair counts (default "
                             f"{','.join(str(n) for n in DEFAULT_LOOKS)}: the last is its budget)")
    parser.add_argument("--work-dir", default="reports/bisect", help="the probes' reports and logs (default "
                                                                     "reports/bisect)")
    parser.add_argument("--probe-timeout", type=float, default=None,
                        help="seconds one probe may take; past it the candidate is skipped (default: no limit)")
    parser.add_argument("--json", default=None, help="also write the result as JSON to this file")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER,
                        help="after --: the pytest selection every probe runs, e.g. -- -m cpu -k resnet18")


def probe_settings(args: argparse.Namespace) -> ProbeSettings:
    """The probes' settings from the options of :func:`add_probe_options`.

    Raises:
        CliError: an empty --setup, or --looks that are not increasing even pair counts.
    """
    if args.setup is not None and not args.setup.strip():
        raise CliError("--setup", "is empty", "give the shell command that builds a commit's stack, or leave --setup "
                       "out (this interpreter with the worktree on PYTHONPATH)")
    pytest_args = tuple(args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args)
    return ProbeSettings(pytest_args, args.threshold, _looks(args.looks), Path(args.work_dir).absolute(),
                         args.probe_timeout)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Any:
    """SIGTERM raises KeyboardInterrupt while the block runs, so that a terminated bisection cleans up as a Ctrl-C
    does (its A/B session ended, its worktrees removed)."""
    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    settings = probe_settings(args)
    devices = probe_devices(args.n, args.devices)
    json_path = output_path(args.json, command_inputs()) if args.json else None
    try:
        record = StoreRecord(args.store)
    except NoStoreUrl as error:
        raise CliError("--store", str(error), "give a database URL, or none") from None
    with sigterm_as_interrupt(), contextlib.ExitStack() as cleanup:
        cleanup.callback(record.close)
        try:
            ladder = _ladder(args, settings, cleanup)
            print(f"bisect: {len(ladder.labels)} {ladder.kind}, {ladder.labels[0]} (good) .. {ladder.labels[-1]} "
                  f"(bad); each probe an A/B of pytest {' '.join(settings.pytest_args) or '(the default selection)'}",
                  flush=True)
            record.start(ladder.kind, ladder.ids, ladder.labels, settings_json(settings))
            probes = StackProbes(ladder.python_of, settings, devices)
            found = bisect_in_rounds(len(ladder.labels), _printing(probes, ladder, record), max(1, len(devices)))
        except KeyboardInterrupt:
            kept = f"; the store keeps the probes that ended (bisection {record.bisection_id})" if record.url else ""
            print(f"interrupted: the running A/B session is ended and the worktrees removed{kept}", flush=True)
            return INTERRUPTED
        document = bisection_json(found, ladder, settings)
        document["id"] = record.bisection_id
        for line in summary(document):
            print(line)
        write_record(document, settings.work_dir, json_path)
        record.finish(document)
    return found.exit_code


def write_record(document: dict[str, Any], work_dir: Path, json_path: Path | None) -> None:
    """The bisection's record: ``bisect.json`` and its page ``bisect.html`` in the work folder (and ``--json``)."""
    text = json.dumps(document, indent=2) + "\n"
    for path in (work_dir / "bisect.json", json_path):
        if path is not None:
            write_output(path, text)
    page = work_dir / "bisect.html"
    write_output(page, render_bisection(document))
    print(f"page: {page}")


def probe_devices(count: int, listed: str | None) -> list[str]:
    """The devices of ``-n count`` probes at once: none for one probe at a time; else the first ``count`` of
    ``--devices`` (else of :func:`visible_gpus`).

    Raises:
        CliError: a count below 1, or more than the devices there are.
    """
    if count < 1:
        raise CliError("-n", f"{count}", "give 1 or more probes at once")
    if count == 1:
        return []
    devices = [d.strip() for d in listed.split(",") if d.strip()] if listed is not None else visible_gpus()
    if len(devices) < count:
        found = ",".join(devices) or "none"
        raise CliError("-n", f"{count} probes at once need {count} GPUs, {len(devices)} found ({found})",
                       "probes at once each need a device of their own: give -n 1, or --devices with enough GPUs")
    return devices[:count]


def visible_gpus() -> list[str]:
    """The GPUs a probe may be pinned to, as ``CUDA_VISIBLE_DEVICES`` names them: its entries where it is set, else
    the indices ``nvidia-smi`` lists; none without either (torch is not imported here)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                                text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in listed.splitlines() if line.strip()]


def _ladder(args: argparse.Namespace, settings: ProbeSettings, cleanup: contextlib.ExitStack) -> Ladder:
    if args.repo is None:
        for option in ("good", "bad", "setup"):
            if getattr(args, option) is not None:
                raise CliError(f"--{option}", "is for a bisection over commits", "give --repo with it, or leave it out")
    if args.stacks is not None:
        return stacks_ladder(_stacks(args.stacks))
    if args.env_steps is not None:
        return env_steps_ladder(Path(args.env_steps), cleanup)
    if args.good is None:
        raise CliError("--good", "is missing", "give the known good commit of --repo")
    repo = repository_root(Path(args.repo), "--repo")
    return commits_ladder(repo, args.good, args.bad or "HEAD", args.setup, settings.work_dir, cleanup)


def _printing(probes: StackProbes, ladder: Ladder, record: StoreRecord) -> Any:
    """``probes.run_round``, printing each probe as it starts and as it ends, and keeping it in the store."""
    labels = ladder.labels

    def run_round(jobs: list[tuple[int, int]]) -> list[ProbeOutcome | CandidateSkipped]:
        first = probes.run_count + 1
        for number, (candidate, reference) in enumerate(jobs, start=first):
            device = f" on device {probes.devices[number - first]}" if probes.devices else ""
            print(f"probe {number}: {labels[candidate]} against {labels[reference]}{device} ...", flush=True)
        outcomes = probes.run_round(jobs)
        for number, ((candidate, reference), outcome) in enumerate(zip(jobs, outcomes, strict=True), start=first):
            prefix = f"  probe {number}: " if len(jobs) > 1 else "  "
            if isinstance(outcome, CandidateSkipped):
                print(f"{prefix}skipped: {_first_and_last_line(str(outcome))}", flush=True)
                side, skipped, ran = Side.SKIP, str(outcome) or "skipped", None
            else:
                print(f"{prefix}{outcome_line(outcome)}", flush=True)
                side, skipped, ran = side_of(outcome.verdict, "good" if reference == 0 else "bad"), None, outcome
            record.probe(number, probe_document(ladder.ids[candidate], ladder.ids[reference], side, ran, skipped))
        return outcomes
    return run_round


def _first_and_last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ... ".join(dict.fromkeys([lines[0], lines[-1]])) if lines else ""


def _stacks(text: str) -> list[str]:
    stacks = [entry.strip() for entry in text.split(",") if entry.strip()]
    if len(stacks) < 2:
        raise CliError("--stacks", f"{text!r} names {len(stacks)} interpreter(s)",
                       "give the good one first and the bad one last, comma-separated, at least 2")
    for stack in stacks:
        if not (os.path.isfile(stack) and os.access(stack, os.X_OK)):
            raise CliError("--stacks", f"{stack!r} is not an executable file", "give each stack's python (a venv's "
                           "bin/python, or an executable wrapper)")
    if len(set(stacks)) != len(stacks):
        raise CliError("--stacks", "an interpreter is named twice", "name each stack once, in order")
    return stacks


def _looks(text: str) -> tuple[int, ...]:
    try:
        looks = tuple(int(entry) for entry in text.split(","))
    except ValueError:
        raise CliError("--looks", f"{text!r} is not a list of pair counts", "give e.g. 20,40,80") from None
    if not looks or any(n < 2 or n % 2 for n in looks) or list(looks) != sorted(set(looks)):
        raise CliError("--looks", f"{text!r}", "give increasing even pair counts, e.g. 20,40,80")
    return looks


def outcome_line(outcome: ProbeOutcome) -> str:
    """``regression, B/A 0.876 [0.817, 0.941], 20 pairs, 41 s``: a probe's outcome as the output prints it."""
    ratio = "–" if outcome.ratio is None else f"{outcome.ratio:.3f}"
    if outcome.ratio is not None and outcome.ratio_low is not None and outcome.ratio_high is not None:
        ratio += f" [{outcome.ratio_low:.3f}, {outcome.ratio_high:.3f}]"
    return f"{outcome.verdict}, B/A {ratio}, {outcome.pairs} pairs, {outcome.seconds:.0f} s"


def summary(document: Mapping[str, Any]) -> list[str]:
    """A bisection's JSON document (:func:`bisection_json`, or one the store read back) as the lines the command ends
    with: the culprit and the last good candidate, or the status and where the change is, the skipped candidates, and
    the probes' count and time (with the rounds, the devices' time and the wall time where probes ran at once)."""
    labels = candidate_labels(document)

    def label(candidate: Any) -> str:
        return one_line(labels.get(candidate, candidate))

    status, culprit, first_bad = one_line(document.get("status")), document.get("culprit"), document.get("first_bad")
    if culprit is not None:
        lines = [f"culprit: {label(culprit)} (the first bad; the last good: {label(document.get('last_good'))})"]
    elif first_bad is not None:
        lines = [f"{status}: the first bad is after {label(document.get('last_good'))} and at or before "
                 f"{label(first_bad)}"]
    else:
        lines = [status]
    skipped = document.get("skipped") if isinstance(document.get("skipped"), Mapping) else {}
    lines += [f"skipped {label(candidate)}: {one_line(str(why or '').partition(chr(10))[0])}"
              for candidate, why in skipped.items()]
    seconds, wall = finite_number(document.get("seconds")), finite_number(document.get("wall_seconds"))
    rounds = document.get("rounds") if isinstance(document.get("rounds"), list) else []
    if rounds and len(rounds) < _probe_count(document) and seconds is not None and wall is not None:
        return [*lines, f"{probes_text(document)} in {len(rounds)} rounds, {seconds:.0f} s of devices' time, "
                        f"{wall:.0f} s of wall time"]
    return [*lines, probes_text(document) + ("" if seconds is None else f", {seconds:.0f} s")]


def probes_text(document: Mapping[str, Any]) -> str:
    """``5 probes`` (``1 probe``): the probes of a bisection's document."""
    count = _probe_count(document)
    return f"{count} probe{'' if count == 1 else 's'}"


def _probe_count(document: Mapping[str, Any]) -> int:
    return len(document["probes"]) if isinstance(document.get("probes"), list) else 0


def candidate_labels(document: Mapping[str, Any]) -> dict[Any, Any]:
    """Candidate id -> label, where the document's (or a store row's) two lists agree; else none."""
    ids, labels = document.get("candidates"), document.get("labels")
    if not isinstance(ids, list) or not isinstance(labels, list) or len(ids) != len(labels):
        return {}
    return {candidate: label for candidate, label in zip(ids, labels, strict=True) if isinstance(candidate, str)}


def bisection_json(found: Bisection, ladder: Ladder, settings: ProbeSettings) -> dict[str, Any]:
    """The bisection as a JSON-able dict: the status, exit code, the candidates (by id: a path, a full sha, a step's
    settings), culprit, bounds, every probe, the skipped candidates and the settings."""
    ids = ladder.ids
    return {"status": found.status, "exit_code": found.exit_code, "kind": ladder.kind, "candidates": ids,
            "labels": ladder.labels, "culprit": None if found.culprit is None else ids[found.culprit],
            "last_good": ids[found.last_good], "first_bad": None if found.first_bad is None else ids[found.first_bad],
            "probes": [_probe_json(probe, ids) for probe in found.probes],
            "skipped": {ids[index]: why for index, why in found.skipped.items()}, "seconds": found.seconds,
            "wall_seconds": found.wall_seconds, "rounds": found.rounds,
            "settings": settings_json(settings)}


def settings_json(settings: ProbeSettings) -> dict[str, Any]:
    """The probes' settings as the JSON and the store keep them."""
    return {"pytest_args": list(settings.pytest_args), "threshold": settings.threshold, "looks": list(settings.looks),
            "work_dir": str(settings.work_dir), "timeout_s": settings.timeout_s}


def _probe_json(probe: Probe, ids: list[str]) -> dict[str, Any]:
    return probe_document(ids[probe.candidate], ids[probe.reference], probe.side, probe.outcome, probe.skipped)


def probe_document(candidate: str, reference: str, side: Side, outcome: ProbeOutcome | None,
                   skipped: str | None) -> dict[str, Any]:
    """One probe as the JSON and the store keep it: the candidate's and the reference's ids, the side, and the
    outcome's verdict, ratio, bounds, pairs, seconds and details (a skipped probe: why, instead)."""
    return {"candidate": candidate, "reference": reference, "side": str(side), "skipped": skipped,
            **({} if outcome is None else {"verdict": outcome.verdict, "ratio": outcome.ratio,
                                           "ratio_low": outcome.ratio_low, "ratio_high": outcome.ratio_high,
                                           "pairs": outcome.pairs, "seconds": outcome.seconds,
                                           "details": outcome.details})}
