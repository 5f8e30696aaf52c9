"""The timing discipline itself, on operations of known duration (real sleeps, real clocks)."""

import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from gpu_agent import schedstat, timing, windows
from gpu_agent.timing import OpError, Policy, time_rounds

CPU = torch.device("cpu")
# Sleeping operations still wait for a CPU to wake up on a busy machine; tests of other
# properties than that take every block as quiet.
ANY_WAIT = math.inf


def sleeper(ms: float, calls: list[str], name: str, slow: Callable[[], bool] = lambda: False) -> Callable[[], None]:
    """An operation that takes `ms` (3× as long while `slow()`), recording each call."""

    def op() -> None:
        calls.append(name)
        time.sleep(ms / 1000 * (3 if slow() else 1))

    return op


def test_operations_are_timed_round_robin_with_rotating_order() -> None:
    """Every operation runs in every round, and no operation always follows the same one."""
    calls: list[str] = []
    ops = {name: sleeper(1, calls, name) for name in "abc"}
    out = time_rounds(
        ops, CPU, Policy(time_cap_s=10, target_spread=-1, min_rounds=3, max_rounds=3, max_reps=1, quiet_wait=ANY_WAIT)
    )
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert all(t.rounds == 3 and t.runs == 3 and not t.stable for t in out.values())


def test_a_noisy_stretch_does_not_bias_the_value() -> None:
    """A slow stretch covering whole rounds is discarded by the minimum of round medians."""
    calls: list[str] = []
    # Rounds 3 to 5 of 6 (calls 5 to 10: 2 operations × 1 rep) run 3× slower, as if another process woke up.
    noisy = lambda: 5 <= len(calls) <= 10  # noqa: E731
    # Sleeps long beside a busy host's wake-up delays (1-3 ms): 4 and 8 ms ones left two quiet rounds 72% apart.
    ops = {"a": sleeper(20, calls, "a", noisy), "b": sleeper(40, calls, "b", noisy)}
    out = time_rounds(
        ops, CPU, Policy(time_cap_s=10, target_spread=-1, min_rounds=6, max_rounds=6, max_reps=1, quiet_wait=ANY_WAIT)
    )
    for name, ms in (("a", 20), ("b", 40)):
        assert ms <= out[name].value_ms < ms * 1.5, out[name]
        # The noise is in the record: the median of all runs sits among the slow ones.
        assert out[name].median_ms > out[name].value_ms
        agreement = out[name].agreement
        assert agreement is not None and agreement < 0.5


def test_stops_when_stable_at_the_cap_or_on_request() -> None:
    """Stable operations stop at min_rounds; otherwise the time cap or a stop request ends the window."""
    calls: list[str] = []
    ops = {"a": sleeper(2, calls, "a")}
    stable = time_rounds(
        ops,
        CPU,
        Policy(time_cap_s=30, target_spread=0.5, min_rounds=3, stable_rounds=5, max_rounds=50, quiet_wait=ANY_WAIT),
    )
    assert stable["a"].stable and stable["a"].rounds == 5
    started = time.perf_counter()
    capped = time_rounds(
        ops,
        CPU,
        Policy(
            time_cap_s=0.3, target_spread=-1, min_rounds=3, settle_rounds=10_000, max_rounds=10_000, quiet_wait=ANY_WAIT
        ),
    )
    # The cap ended it (at least 0.3 s), not max_rounds (10,000 rounds of 2 ms: 20 s).
    assert time.perf_counter() - started >= 0.3 and not capped["a"].stable and 3 < capped["a"].rounds < 10_000
    stopped = time_rounds(
        ops,
        CPU,
        Policy(time_cap_s=30, target_spread=-1, min_rounds=4, max_rounds=50, quiet_wait=ANY_WAIT),
        stop=lambda: True,
    )
    assert stopped["a"].rounds == 4


def test_reps_per_round_follow_the_operation_length() -> None:
    """Short operations are repeated within a round (median of several), long ones run once."""
    calls: list[str] = []
    ops = {"short": sleeper(0.2, calls, "short"), "long": sleeper(30, calls, "long")}
    # 50 ms a round: several runs of the short one even where a loaded machine stretches its sleep to ms.
    out = time_rounds(
        ops, CPU, Policy(time_cap_s=30, target_spread=-1, min_rounds=3, max_rounds=3, round_s=0.05, quiet_wait=ANY_WAIT)
    )
    assert out["short"].reps > 1 and out["long"].reps == 1
    assert out["short"].runs == 1 + 2 * out["short"].reps and calls.count("long") == 3


def test_a_failing_operation_names_itself() -> None:
    """A failure inside timing says which operation raised, with the original error."""

    def boom() -> None:
        raise RuntimeError("CUDA out of memory")

    with pytest.raises(OpError) as err:
        time_rounds({("bs", 8): boom}, CPU, Policy(time_cap_s=1))
    assert err.value.key == ("bs", 8) and windows.is_oom(err.value.cause)


def test_windows_are_bounded_in_points_and_memory() -> None:
    """Consecutive points share a window while they fit together and the window is not full."""
    footprint = lambda points: 10 * sum(points)  # noqa: E731
    assert windows.pack([1, 2, 3, 4, 5], footprint, limit=1000, most=2) == [[1, 2], [3, 4], [5]]
    assert windows.pack([1, 2, 3, 40, 5], footprint, limit=100, most=4) == [[1, 2, 3], [40], [5]]


class ScriptedReader:
    """Stands in for schedstat.Reader: the run-queue delay a test scripts (waited[0], seconds)."""

    def __init__(self, waited: list[float]) -> None:
        self.waited = waited

    def __call__(self) -> float:
        return self.waited[0]

    def close(self) -> None:
        """Nothing to close."""


def scripted_wait(monkeypatch: pytest.MonkeyPatch, calls: list[str], busy: Callable[[], bool]) -> Callable[[], None]:
    """An operation of 4 ms, or of 12 ms of which 8 waiting for a CPU while busy(), as the kernel would report it.

    The kernel's run-queue delay is scripted here because no test can order a shared machine to
    be busy in given rounds only; test_a_competing_process_shows_as_waiting checks the real signal.
    """
    waited = [0.0]
    monkeypatch.setattr(timing.schedstat, "reader", lambda: ScriptedReader(waited))

    def op() -> None:
        calls.append("op")
        if busy():
            started = time.perf_counter()
            time.sleep(0.012)
            waited[0] += (time.perf_counter() - started) * 2 / 3
        else:
            time.sleep(0.004)

    return op


def test_blocks_that_waited_for_a_cpu_are_set_aside(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks run on a busy machine do not count; the value comes from the quiet ones."""
    calls: list[str] = []
    op = scripted_wait(monkeypatch, calls, lambda: 2 <= len(calls) <= 4)  # rounds 2-4 of 6
    out = time_rounds({"a": op}, CPU, Policy(time_cap_s=10, target_spread=-1, min_rounds=3, max_rounds=6, max_reps=1))
    t = out["a"]
    assert t.rounds == 6 and t.quiet_rounds == 3 and t.wait > 0.3
    assert 4 <= t.value_ms < 6 and t.median_ms > 6


def test_without_enough_quiet_blocks_it_keeps_trying_then_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the time cap it goes on until enough blocks were quiet, up to a few caps; then it uses all."""
    calls: list[str] = []
    op = scripted_wait(monkeypatch, calls, lambda: len(calls) <= 5)  # the first 5 rounds are busy
    policy = Policy(time_cap_s=0.01, target_spread=-1, min_rounds=3, max_rounds=50, max_reps=1, busy_cap_factor=1000)
    patient = time_rounds({"a": op}, CPU, policy)["a"]
    assert patient.rounds == 8 and patient.quiet_rounds == 3 and patient.value_ms < 6
    calls.clear()
    hurried = time_rounds({"a": op}, CPU, replace(policy, busy_cap_factor=1))["a"]
    assert hurried.quiet_rounds == 0 and hurried.value_ms >= 12


@pytest.mark.skipif(not schedstat.available(), reason="the kernel does not report run-queue delay")
def test_a_competing_process_shows_as_waiting() -> None:
    """A process spinning on the same CPU makes this process's blocks wait; none counts as quiet."""
    saved = os.sched_getaffinity(0)
    cpu = min(saved)
    spin = f"import os; os.sched_setaffinity(0, {{{cpu}}}); print(flush=True)\nwhile True: pass"
    competitor = subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
    try:
        assert competitor.stdout is not None and competitor.stdout.readline()  # it is spinning on `cpu`
        os.sched_setaffinity(0, {cpu})  # the thread that runs the operations
        work = lambda: sum(range(1_000_000))  # noqa: E731 - fixed work (~25 ms), longer than a scheduler slice
        out = time_rounds({"a": work}, CPU, Policy(time_cap_s=30, target_spread=-1, min_rounds=5, max_rounds=5))
    finally:
        os.sched_setaffinity(0, saved)
        competitor.kill()
        competitor.wait()
    assert out["a"].wait > 0.3 and out["a"].quiet_rounds == 0


def test_rewarm_discards_the_cost_of_switching_operations() -> None:
    """An operation slow on its first call after another one ran is timed warm when blocks rewarm."""
    last: list[str] = []

    def op(name: str) -> Callable[[], None]:
        def run() -> None:
            # 12 ms right after a switch (caches rebuilt), 4 ms when it ran last too.
            time.sleep(0.012 if last[-1:] != [name] else 0.004)
            last.append(name)

        return run

    ops = {name: op(name) for name in "abc"}  # three: with two, rotation repeats one across rounds
    policy = Policy(time_cap_s=10, target_spread=-1, min_rounds=4, max_rounds=4, max_reps=1, quiet_wait=ANY_WAIT)
    cold = time_rounds(ops, CPU, policy)
    warm = time_rounds(ops, CPU, replace(policy, rewarm=1))
    assert all(cold[k].value_ms >= 12 and 4 <= warm[k].value_ms < 8 and warm[k].rewarm == 1 for k in ops)


def steady_and_restless(calls: list[str]) -> dict[str, Callable[[], None]]:
    """A steady 2 ms operation, and one 30 % slower on each call, whose blocks never agree within 10 %."""
    restless_ms = [2.0]

    def restless() -> None:
        calls.append("restless")
        time.sleep(restless_ms[0] / 1000)
        restless_ms[0] *= 1.3

    return {"steady": sleeper(2, calls, "steady"), "restless": restless}


def test_a_stable_operation_leaves_the_rounds_while_a_restless_one_goes_on() -> None:
    """Each operation stops on its own: the steady one once it agrees, the restless one at its cap in blocks."""
    calls: list[str] = []
    policy = Policy(time_cap_s=30, target_spread=0.1, settle_rounds=8, max_reps=1, quiet_wait=ANY_WAIT)
    out = time_rounds(steady_and_restless(calls), CPU, policy)
    # Two of five 2 ms sleeps agree within 10 %: the steady operation stops at stable_rounds.
    assert out["steady"].stable and out["steady"].rounds == policy.stable_rounds == calls.count("steady")
    assert not out["restless"].stable and out["restless"].rounds == 8 and calls.count("restless") == 8
    assert out["restless"].agreement is not None and out["restless"].agreement > 0.1


def test_a_long_operation_that_used_its_time_is_stable_with_fewer_blocks() -> None:
    """stable_rounds quiet blocks make a short operation stable; min_rounds do, once its time share is spent."""
    calls: list[str] = []
    policy = Policy(time_cap_s=0.2, target_spread=0.5, min_rounds=3, stable_rounds=5, quiet_wait=ANY_WAIT)
    out = time_rounds({"short": sleeper(1, calls, "short"), "long": sleeper(40, calls, "long")}, CPU, policy)
    # The long one's share is 0.1 s: spent after 3 blocks of 40 ms; the short one's 5 blocks take a few ms.
    assert out["long"].stable and out["long"].rounds == 3
    assert out["short"].stable and out["short"].rounds == 5


def test_a_short_operation_is_capped_in_blocks_a_long_one_by_its_share_of_the_time() -> None:
    """The cap follows an operation's length: a few blocks of a short one, its share of the window for a long one."""
    calls: list[str] = []
    never = Policy(time_cap_s=0.4, target_spread=-1, min_rounds=3, settle_rounds=6, max_reps=1, quiet_wait=ANY_WAIT)
    ops = {"short": sleeper(1, calls, "short"), "long": sleeper(50, calls, "long")}
    out = time_rounds(ops, CPU, never)
    # The long one's share is 0.2 s of the 0.4 s window: 4 blocks of 50 ms, before 6 blocks; the short one
    # (6 ms in all) stops at 6 blocks, far from its 0.2 s.
    assert out["short"].rounds == 6 and out["long"].rounds == 4
    assert not out["short"].stable and not out["long"].stable


class StandInCudaEvent:
    """Stands in for torch.cuda.Event on this machine without a GPU: records the host clock when "recorded"."""

    synchronized = 0

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.at: float | None = None

    def record(self) -> None:
        self.at = time.perf_counter()

    def synchronize(self) -> None:
        StandInCudaEvent.synchronized += 1

    def elapsed_time(self, end: "StandInCudaEvent") -> float:
        assert self.at is not None and end.at is not None
        return (end.at - self.at) * 1000


def test_on_cuda_a_block_is_timed_between_consecutive_events_with_one_synchronise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each run lies between the events before and after it; the block waits for its last event only."""
    monkeypatch.setattr(timing.torch.cuda, "Event", StandInCudaEvent)
    device_syncs: list[object] = []
    monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda device=None: device_syncs.append(device))
    StandInCudaEvent.synchronized = 0
    calls: list[str] = []
    # A 1 ms sleep can take several ms on a loaded machine: a 0.2 s block still holds several runs.
    policy = Policy(time_cap_s=30, target_spread=-1, min_rounds=3, max_rounds=3, cuda_round_s=0.2, quiet_wait=ANY_WAIT)
    out = time_rounds({"a": sleeper(1, calls, "a")}, torch.device("cuda"), policy)["a"]
    assert out.calls == 1 and out.reps > 1 and out.runs == 1 + 2 * out.reps == len(calls)
    assert StandInCudaEvent.synchronized == 3 and len(device_syncs) == 3  # per block, not per run
    assert 1 <= out.value_ms < 3 and out.min_ms >= 1


def test_on_cuda_a_microsecond_operation_is_called_several_times_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shorter than cuda_run_ms, an operation runs several calls between two events; a run is their mean."""
    monkeypatch.setattr(timing.torch.cuda, "Event", StandInCudaEvent)
    monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda device=None: None)
    calls: list[str] = []
    policy = Policy(
        time_cap_s=30,
        target_spread=-1,
        min_rounds=3,
        max_rounds=3,
        cuda_round_s=0.08,
        cuda_run_ms=20,
        quiet_wait=ANY_WAIT,
    )
    out = time_rounds({"a": sleeper(1, calls, "a")}, torch.device("cuda"), policy)["a"]
    # The first run (1 call) took 1 ms or, on a loaded machine, a few: up to 20 calls make a run of at least
    # 20 ms, and an 80 ms block holds 4 such runs or fewer.
    assert 2 <= out.calls <= 20 and 1 <= out.reps <= 4
    assert len(calls) == 1 + 2 * out.reps * out.calls and out.runs == 1 + 2 * out.reps
    assert 1 <= out.value_ms < 3  # the mean of a run's calls, not their sum


@pytest.mark.skipif(not schedstat.available(), reason="the kernel does not report run-queue delay")
def test_the_wait_reader_keeps_a_finished_threads_last_figure() -> None:
    """Reading again is a pread per thread; a thread that ended does not take its wait back (no negative wait)."""
    import threading

    release = threading.Event()
    worker = threading.Thread(target=lambda: (sum(range(100_000)), release.wait(10)))
    worker.start()
    reader = schedstat.reader()  # the worker among its threads
    try:
        first = reader()
        assert first == pytest.approx(schedstat.run_delay_s(), abs=0.05)
        release.set()
        worker.join()
        assert reader() >= first
    finally:
        reader.close()


def test_a_long_operation_short_of_quiet_blocks_may_use_the_whole_windows_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Of several operations, one whose first blocks waited for a CPU goes on past its share of the window until it
    has enough quiet blocks (it stored a busy block's figure, 3x its runs, after 3 blocks before)."""
    calls: list[str] = []
    op = scripted_wait(monkeypatch, calls, lambda: len(calls) <= 4)  # its first 4 blocks are busy
    others = {f"o{i}": (lambda: time.sleep(0.004)) for i in range(7)}
    # 8 operations share 0.08 s: 0.01 s each, two busy blocks of 12 ms each use twice the share
    policy = Policy(time_cap_s=0.08, target_spread=-1, min_rounds=3, max_rounds=50, max_reps=1, busy_cap_factor=2)
    out = time_rounds({"a": op, **others}, CPU, policy)["a"]
    assert out.quiet_rounds >= 3 and out.value_ms < 6
