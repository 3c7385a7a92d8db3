"""How a sandboxed call gives way to a timer: two hooks, set by the performance task's quiet room
(grader/bertlab_grader/performance/gate.py ``install``) in a grader worker, read by every session of that process
(session.py ``_next_message``).

- ``timer_waiting()``: whether another worker waits to time while this one is at work;
- ``give_way()``: returns once that timer is done.

A call that waits for its submission asks ``timer_waiting`` every ``POLL_S``; when it says yes, the
submission's processes are stopped (SIGSTOP, through the sandbox's template), the worker gives way,
the processes go on (SIGCONT), and the stopped time is not counted against the call's limit. So a
timer never waits for another student's long call or hang.

A module of its own, without imports: the main process installs the quiet room too, and must not
import torch (the wire format's) for it.
"""

from __future__ import annotations

from typing import Callable, Optional

#: While a call waits for the submission, how often it asks whether a timer wants the machine.
POLL_S = 0.05

timer_waiting: Optional[Callable[[], bool]] = None
give_way: Optional[Callable[[], None]] = None


def install(waiting: Optional[Callable[[], bool]], way: Optional[Callable[[], None]]) -> None:
    """Set (or, with None, remove) this process's two hooks."""
    global timer_waiting, give_way
    timer_waiting, give_way = waiting, way
