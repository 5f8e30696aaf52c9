"""How long this process's threads waited for a CPU: the kernel's per-thread run-queue delay.

A thread that is ready to run but waits because other work holds the CPUs is exactly how a
shared machine distorts a timing (on a busy 2-core machine one conv took 11 to 77 ms per run,
its threads' wait growing with the run time). Linux reports it per thread, in nanoseconds, as
the second field of /proc/self/task/<tid>/schedstat.
"""

import os

TASKS = "/proc/self/task"


def available() -> bool:
    """True where the kernel reports run-queue delay."""
    return os.path.exists(f"{TASKS}/{os.getpid()}/schedstat")


def run_delay_s() -> float:
    """Seconds all threads of this process have spent runnable but not running, so far (0 if unknown)."""
    total = 0
    try:
        tids = os.listdir(TASKS)
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"{TASKS}/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


class Reader:
    """run_delay_s() of the threads alive when it was made, their files opened once: a read is a pread per thread.

    Listing and opening every thread's file costs ~15 µs a thread, read twice around every block: on a 16-core
    GPU host (30-odd threads) far longer than a block of microsecond operations. Call close() when done.
    """

    def __init__(self) -> None:
        self._fds: list[int] = []
        self._last: list[int] = []
        try:
            tids = os.listdir(TASKS)
        except OSError:
            return
        for tid in tids:
            try:
                self._fds.append(os.open(f"{TASKS}/{tid}/schedstat", os.O_RDONLY))
            except OSError:
                continue  # a thread that ended meanwhile
        self._last = [0] * len(self._fds)

    def __call__(self) -> float:
        """Seconds these threads have spent runnable but not running, so far (0 if unknown)."""
        for i, fd in enumerate(self._fds):
            try:
                self._last[i] = int(os.pread(fd, 128, 0).split()[1])
            except (OSError, IndexError, ValueError):
                continue  # a thread that ended since waits no more: its last figure stands
        return sum(self._last) / 1e9

    def close(self) -> None:
        """Close the files."""
        for fd in self._fds:
            os.close(fd)
        self._fds = []


def reader() -> Reader:
    """A Reader of this process's threads now."""
    return Reader()
