"""An agent whose layer measurements hang for ever (heartbeats go on): `python -m tests.support.hanging_agent`."""

import runpy
import threading
from typing import Any

from gpu_agent import layer_bench


def _hang(*_: Any, **__: Any) -> list[int]:
    threading.Event().wait()  # never set: the task hangs as a stuck driver call would
    return []


layer_bench.measure = _hang
runpy.run_module("gpu_agent", run_name="__main__")
