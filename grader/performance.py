"""The performance task: how fast is the submission, relative to the reference, on the same inputs?

Measurement (pytest-benchmark style, but paired): after warm-up calls, the reference and the
submission are called in alternating order for ``ROUNDS`` rounds of ``REPEAT`` pairs each (ref, student;
student, ref; ...), so a burst of load from other processes hits both sides alike; within a round each
side keeps its fastest call (as pytest-benchmark's min, the least disturbed). The score is the MEDIAN
of the per-round ratios student_time / reference_time, placed in a band:

    ratio <= 2   full points        ratio <= 10   half points        slower   no points

Only a right answer earns speed points: the submission's output must match the reference's on the
timing input (loosely), otherwise "fast" means nothing. A submission much slower than the reference
(over ``GIVE_UP_RATIO`` on the second warm-up call) is not timed further: its band is already known.

Through the sandbox: a call to the submission also pays the trip across the boundary (encoding,
socket, decoding: grader/rpc.py). Worker-side timing does not exist, and the reference cannot run in
the sandbox (it must not see solutions/), so two choices keep the comparison fair:

1. the reference is timed on the same kind of path: its arguments and result are encoded, sent
   through a local socket and decoded with the real wire format (``wire_roundtrip``); only the
   process switch to the worker is not reproduced;
2. inputs are sized so that compute dominates the remaining overhead (a few MiB per call against tens
   of milliseconds of work), and the bands are wide (2x, 10x).

See docs/hidden-suites.md ("Performance") for the sizes and the repeatability measurements.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

# (largest ratio, fraction of the points), checked in order; anything slower scores 0.
BANDS: tuple[tuple[float, float], ...] = ((2.0, 1.0), (10.0, 0.5))
ROUNDS = 5
REPEAT = 3
GIVE_UP_RATIO = 50.0


@dataclass
class Timing:
    """Seconds per call for each side, round by round, and the paired ratios."""

    reference: list[float] = field(default_factory=list)
    student: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    gave_up: bool = False

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def fraction(self) -> float:
        return band_fraction(self.ratio)

    def describe(self, what: str) -> str:
        """One sentence for the student: the ratio, the times, and the band."""
        ref_ms, student_ms = 1e3 * statistics.median(self.reference), 1e3 * statistics.median(self.student)
        how = ("on a warm-up call (not timed further)" if self.gave_up else
               f"median of {len(self.ratios)} interleaved rounds")
        bands = ", ".join(f"{'full' if f == 1 else 'half' if f == 0.5 else f'{f:g} of the'} points up to {r:g}x"
                          for r, f in BANDS)
        return (f"{what} took {self.ratio:.1f}x the reference's time ({how}: {student_ms:.1f} ms vs "
                f"{ref_ms:.1f} ms); {fraction_words(self.fraction)} ({bands}).")


def band_fraction(ratio: float) -> float:
    """The fraction of the points a time ratio earns."""
    for limit, fraction in BANDS:
        if ratio <= limit:
            return fraction
    return 0.0


def fraction_words(fraction: float) -> str:
    return {1.0: "full points", 0.5: "half points", 0.0: "no points"}.get(fraction, f"{fraction:g} of the points")


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def compare_speed(student: Callable[[], Any], reference: Callable[[], Any], *, rounds: int = ROUNDS,
                  repeat: int = REPEAT, give_up_ratio: float = GIVE_UP_RATIO) -> tuple[Timing, Any, Any]:
    """Time ``student()`` against ``reference()``, interleaved. Returns (timing, student's last result,
    reference's last result). Exceptions from ``student()`` propagate (the test reports them)."""
    timing = Timing()
    # Warm-up: the first call pays one-off costs (allocations, lazy imports; through the sandbox even
    # the start of the submission's process), so it is never timed. The second decides whether the
    # submission is so slow that more rounds would only waste time.
    student()
    reference()
    ref_time, ref_result = _timed(reference)
    student_time, student_result = _timed(student)
    if student_time > give_up_ratio * max(ref_time, 1e-4):
        timing.reference.append(ref_time)
        timing.student.append(student_time)
        timing.ratios.append(student_time / max(ref_time, 1e-9))
        timing.gave_up = True
        return timing, student_result, ref_result
    for r in range(rounds):
        # A round is `repeat` alternating pairs; each side keeps its fastest call, so one burst of
        # load from another process does not decide the round.
        ref_times, student_times = [], []
        for i in range(repeat):
            if (r + i) % 2 == 0:
                t, ref_result = _timed(reference)
                ref_times.append(t)
                t, student_result = _timed(student)
                student_times.append(t)
            else:
                t, student_result = _timed(student)
                student_times.append(t)
                t, ref_result = _timed(reference)
                ref_times.append(t)
        timing.reference.append(min(ref_times))
        timing.student.append(min(student_times))
        timing.ratios.append(min(student_times) / max(min(ref_times), 1e-9))
    return timing, student_result, ref_result


# ---------------------------------------------------------------------------------------------
# The same path for the reference
# ---------------------------------------------------------------------------------------------

def is_in_process(impl) -> bool:
    """True when ``impl`` runs in this process (solutions, a trusted directory, `bertlab check`)."""
    from bertlab.implementations import Implementation

    return isinstance(impl, Implementation)


def wire_roundtrip(value: Any) -> Any:
    """``value`` sent through a local socket in the sandbox's wire format (grader/rpc.py): encoded,
    framed, copied through the kernel and decoded, as one direction of a sandboxed call is."""
    try:
        import socket
        import threading

        from grader import rpc
    except ImportError:  # pragma: no cover - the kit always ships rpc.py with the grader
        return value
    encoder = rpc.Encoder()
    data = encoder.encode(value)
    mine, theirs = socket.socketpair()
    try:
        sender, receiver = rpc.Channel(mine), rpc.Channel(theirs)
        # A big frame does not fit in the socket buffer: send from a thread while this one reads.
        thread = threading.Thread(target=sender.send, args=({"v": data}, encoder.tensors), daemon=True)
        thread.start()
        header, tensors = receiver.recv(timeout=60)
        thread.join()
    finally:
        mine.close()
        theirs.close()
    return rpc.Decoder(tensors).decode(header["v"])


def reference_call(impl, fn: Callable, *args, **kwargs) -> Callable[[], Any]:
    """A zero-argument call of the reference ``fn`` that travels the same path as a call into
    ``impl``: in process, a plain call; through the sandbox, arguments and result cross the wire
    format as well."""
    if is_in_process(impl):
        return lambda: fn(*args, **kwargs)

    def call():
        a, k = wire_roundtrip([list(args), dict(kwargs)])
        return wire_roundtrip(fn(*a, **k))

    return call
