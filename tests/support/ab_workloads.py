"""Workloads for the A/B worker self-tests (tests/ab/test_ab_workers.py), imported by a worker as a ``--workloads``
module: a tiny model, one whose forward prints to stdout (the worker's channel must stay clean), one whose forward
runs out of memory, one whose build leaves a child process in the worker's process group that ignores SIGTERM, one
whose build records which stack built it first, and one whose forward sleeps for the seconds :data:`SLEEP_ENV` gives
(a stack made slower by a setting of its own, for tests/ab/test_ab_session.py and tests/ab/test_ab_plugin.py),
raises at a given call, or exits the worker at a given call."""

import os
import subprocess
import sys
import time
import weakref

import torch
from torch import nn

from hwregress import workloads

ORDER_ENV = "HWREGRESS_AB_TEST_ORDER_FILE"  # ab_ordered's: the file its builds append their stack's label to
STACK_ENV = "HWREGRESS_AB_TEST_STACK"
CHILD = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('child up', flush=True); " \
        "time.sleep(600)"


def _tiny() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 16), nn.ReLU(), nn.Linear(16, 10))


class _Noisy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = _tiny()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        print("a library printing to stdout", flush=True)
        return self.body(x)


class _OutOfMemory(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = _tiny()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise getattr(torch, "OutOfMemoryError", RuntimeError)("CUDA out of memory (injected by the self-test)")


SLEEP_ENV = "HWREGRESS_AB_TEST_SLEEP_S"  # seconds each forward of ab_sleepy sleeps (unset: 0)
FAIL_ENV = "HWREGRESS_AB_TEST_FAIL_CALL"  # the forward call of ab_sleepy (from 1) that raises (unset: none)
EXIT_CALL_ENV = "HWREGRESS_AB_TEST_EXIT_CALL"  # the forward call of ab_sleepy at which the worker exits 3 (unset: none)
EXIT_BATCH_ENV = "HWREGRESS_AB_TEST_EXIT_BATCH"  # ... only for inputs of this batch size (unset: any)


FAIL_ONCE_ENV = "HWREGRESS_AB_TEST_FAIL_ONCE"  # a file: only the first process to reach the failing call fails


def _first_to_fail() -> bool:
    """True unless :data:`FAIL_ONCE_ENV` names a file that another process has already taken (removed)."""
    once = os.environ.get(FAIL_ONCE_ENV)
    if not once:
        return True
    try:
        os.unlink(once)
    except FileNotFoundError:
        return False
    return True


class _Sleepy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = _tiny()
        self.sleep_s = float(os.environ.get(SLEEP_ENV, "0"))
        self.fail_call = int(os.environ.get(FAIL_ENV, "0"))
        self.exit_call = int(os.environ.get(EXIT_CALL_ENV, "0"))
        self.exit_batch = int(os.environ.get(EXIT_BATCH_ENV, "0"))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == self.fail_call and _first_to_fail():
            raise RuntimeError(f"forward call {self.calls} failed (injected by the self-test)")
        if self.calls == self.exit_call and self.exit_batch in (0, x.shape[0]):
            print(f"ab_sleepy: exiting at forward call {self.calls} (injected by the self-test)", file=sys.stderr,
                  flush=True)
            os._exit(3)
        time.sleep(self.sleep_s)
        return self.body(x)


SLOT_ENV = "HWREGRESS_AB_TEST_SLOT_DIR"  # a folder standing for one device that holds one ab_exclusive model at a time


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _exclusive() -> nn.Module:
    """A model as large as the device (the folder :data:`SLOT_ENV` names stands for it): its build runs out of memory
    while another live process's ab_exclusive model is on the device, and its slot is freed when the model is."""
    folder = os.environ[SLOT_ENV]
    holders = [int(name) for name in os.listdir(folder) if name.isdigit() and int(name) != os.getpid()]
    if any(_pid_alive(pid) for pid in holders):
        raise getattr(torch, "OutOfMemoryError", RuntimeError)(
            f"CUDA out of memory: the device holds process {holders}'s model (injected by the self-test)")
    slot = os.path.join(folder, str(os.getpid()))
    open(slot, "w").close()
    model = _tiny()
    weakref.finalize(model, os.unlink, slot)
    return model


def _ordered() -> nn.Module:
    """A tiny model whose build appends its stack's label (:data:`STACK_ENV`, A where unset) to the file
    :data:`ORDER_ENV` names: the order the two stacks' models were built in."""
    with open(os.environ[ORDER_ENV], "a") as order:
        order.write(os.environ.get(STACK_ENV, "A") + "\n")
    return _tiny()


def _with_child() -> nn.Module:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=sys.stderr)
    print(f"ab_with_child: started child {child.pid}", file=sys.stderr, flush=True)
    return _tiny()


for _name, _build in (("ab_tiny", _tiny), ("ab_noisy", _Noisy), ("ab_oom", _OutOfMemory),
                      ("ab_with_child", _with_child), ("ab_sleepy", _Sleepy),
                      ("ab_exclusive", _exclusive), ("ab_ordered", _ordered)):
    workloads.register(workloads.Workload(_name, _build, input_shape=(3, 4, 4), num_classes=10), replace=True)
