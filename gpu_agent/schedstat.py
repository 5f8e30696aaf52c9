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
