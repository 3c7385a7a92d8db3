"""What a hidden test sees while grading: ``impl`` as a RemoteImplementation, and student exceptions.

``impl.cka.linear_cka(X, Y)`` sends a call request to the sandboxed server (bertlab_grader/sandbox) and returns
plain data. Objects that are not plain data stay in the server and come back as *handles* (``Remote``
proxies): attribute access on a handle builds a longer path lazily, calling it sends a request.

A handle never pretends to be a value: it compares equal only to itself, and truth value, ``float``,
``int``, ``len`` of non-sized objects, NumPy conversion and iteration fail with a TypeError that says
what the submission returned. So an object whose ``__eq__`` always says True stays in the sandbox and
cannot make ``torch.testing.assert_close`` pass here.
"""

from __future__ import annotations

import builtins
import contextlib
from typing import Optional

from bertlab.tasks import EXERCISE_MODULES  # noqa: E402
from bertlab_grader.sandbox.inside.rpc import REBUILT_EXCEPTIONS  # noqa: E402


class StudentError(Exception):
    """An exception raised by (or because of) the submission's code, as the trusted side sees it.

    ``type_name`` is the student's exception type, ``message`` its (truncated) message and
    ``student_traceback`` the frames of the student's own files only.
    """

    def __init__(self, message: str = "", type_name: Optional[str] = None, student_traceback: str = ""):
        super().__init__(message)
        self.type_name = type_name or type(self).__name__
        self.message = message
        self.student_traceback = student_traceback

    def __str__(self) -> str:
        if self.student_traceback:
            return f"{self.message}\nIn the submission's code:\n{self.student_traceback.rstrip()}"
        return self.message


class SubmissionTimeout(StudentError):
    """A call into the submission did not return within the time limit (its process was killed)."""


class SubmissionCrashed(StudentError):
    """The submission's process died (exit, signal, memory) or broke the protocol."""


_REBUILT: dict[str, type] = {}


def student_exception(info: dict) -> StudentError:
    """The exception to raise here for a student exception described by the server."""
    type_name = str(info.get("type") or "Exception")
    message = str(info.get("message") or type_name)  # MemoryError() has no message of its own
    builtin = info.get("builtin")
    if builtin in REBUILT_EXCEPTIONS:
        if builtin not in _REBUILT:
            # A StudentError that is also the builtin: `except ValueError` and `except StudentError`
            # both catch it; StudentError's __str__ (KeyError would otherwise quote the message).
            _REBUILT[builtin] = type(builtin, (StudentError, getattr(builtins, builtin)),
                                     {"__module__": __name__, "__str__": StudentError.__str__,
                                      "__doc__": f"A {builtin} raised by the submission."})
        cls = _REBUILT[builtin]
        if type_name != builtin:
            message = f"{type_name}: {message}"
    else:
        cls = StudentError
    return cls(message, type_name=type_name, student_traceback=str(info.get("traceback") or ""))


class HandleRef:
    """Owns one worker-side object id; when the last proxy using it goes, the id is released."""

    __slots__ = ("session", "hid", "generation")

    def __init__(self, session, hid: int, generation: int):
        self.session, self.hid, self.generation = session, hid, generation

    def __del__(self):
        try:
            self.session.release(self.hid, self.generation)
        except Exception:
            pass


class Remote:
    """A module, an object in the server, or a lazy attribute path on one of them."""

    __slots__ = ("_bl_session", "_bl_root", "_bl_path", "_bl_type", "_bl_ref")

    def __init__(self, session, root: tuple, path: tuple = (), type_name: Optional[str] = None,
                 ref: Optional[HandleRef] = None):
        self._bl_session = session
        self._bl_root = root          # ("module", name) or ("handle", id, generation)
        self._bl_path = path
        self._bl_type = type_name
        self._bl_ref = ref

    def __getattr__(self, name: str) -> "Remote":
        # Dunders are never forwarded: libraries probe them (__array_interface__, __iter__, ...) and
        # must see "no such thing", not a lazy remote path.
        if name.startswith("__") and name.endswith("__") or name.startswith("_bl_"):
            raise AttributeError(name)
        return self._bl_child(name)

    def _bl_child(self, name: str) -> "Remote":
        return Remote(self._bl_session, self._bl_root, self._bl_path + (name,), self._bl_type, self._bl_ref)

    def __call__(self, *args, **kwargs):
        return self._bl_session.request(self, "call", args, kwargs)

    def _bl_value(self):
        """Fetch the value of this attribute path (plain data, or another handle)."""
        return self._bl_session.request(self, "get")

    def __len__(self) -> int:
        n = self._bl_session.request(self._bl_child("__len__"), "call")
        if type(n) is not int or n < 0:
            raise TypeError(f"len() of {self._bl_describe()} returned {type(n).__name__}, not a non-negative int")
        return n

    def __getitem__(self, key):
        return self._bl_session.request(self._bl_child("__getitem__"), "call", (key,))

    def _bl_describe(self) -> str:
        if self._bl_path:
            what = ".".join(self._bl_path)
            base = self._bl_root[1] if self._bl_root[0] in ("module", "probe") else f"handle#{self._bl_root[1]}"
            return f"the remote attribute {base}.{what} (call it or use ._bl_value())"
        if self._bl_root[0] == "module":
            return f"the submission's module {self._bl_root[1]}"
        return f"a {self._bl_type or 'object'} returned by the submission (it stays in the sandbox)"

    def _bl_refuse(self, what: str):
        raise TypeError(f"cannot use {self._bl_describe()} as {what}: expected plain data "
                        "(a number, a tensor, a list, ...)")

    def __bool__(self):
        self._bl_refuse("a truth value")

    def __float__(self):
        self._bl_refuse("a float")

    def __int__(self):
        self._bl_refuse("an int")

    def __index__(self):
        self._bl_refuse("an index")

    def __complex__(self):
        self._bl_refuse("a complex number")

    def __array__(self, *args, **kwargs):
        self._bl_refuse("an array")

    def __iter__(self):
        self._bl_refuse("an iterable")

    def __eq__(self, other) -> bool:
        return self is other

    def __ne__(self, other) -> bool:
        return self is not other

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        if self._bl_root[0] == "module" and not self._bl_path:
            return f"<submission module {self._bl_root[1]}>"
        if not self._bl_path:
            return f"<{self._bl_type or 'object'} in the sandbox, handle #{self._bl_root[1]}>"
        return f"<remote {'.'.join(map(str, (self._bl_root[1],) + self._bl_path))}>"

    __str__ = __repr__


class RemoteImplementation:
    """The ``impl`` of a graded submission: ``impl.<module>``, for every exercise module of the
    registry (bertlab/tasks.py), is a proxy of the student's module in the sandbox."""

    def __init__(self, session):
        self.name = "sandbox"
        self._session = session
        for module in EXERCISE_MODULES:
            setattr(self, module, Remote(session, ("module", module)))

    def probe(self, name: str) -> Remote:
        """The kit's probe ``name`` (bertlab/probes.py), run in the submission's process: call it with
        handles and plain data, get plain data back (``bertlab.probes.run_probe`` uses this)."""
        return Remote(self._session, ("probe", name))

    @contextlib.contextmanager
    def call_limit(self, seconds: float):
        """Within this block, each call into the submission may run for ``seconds`` (never less than the
        session's own limit): for the few calls whose inputs are large by design (the memory test's
        million-row corpora), so that correct code never meets the limit beside a competing load."""
        previous = self._session.timeout_s
        self._session.timeout_s = max(previous, float(seconds))
        try:
            yield
        finally:
            self._session.timeout_s = previous

    @contextlib.contextmanager
    def no_retry_of_hung_calls(self):
        """Within this block, a function (or method) that failed hard earlier in this grading (ran
        past its time limit, or crashed its process) fails at once the same way, whatever its inputs:
        for the hints, which give no points, so a hang costs its limit in the tests and not again in
        the hints."""
        self._session.no_retry_of_hung = True
        try:
            yield
        finally:
            self._session.no_retry_of_hung = False

    def start_segment(self, modules: list[str]) -> None:
        """Grade what follows in a fresh process of the submission that imports ``modules`` first
        (grader/bertlab_grader/grading/segments.py)."""
        self._session.start_segment(modules)

    def export_memos(self) -> dict:
        """The session's record of calls that timed out or crashed, as plain data."""
        return self._session.export_memos()

    def seed_memos(self, memos: dict) -> None:
        """Take another session's record of calls that timed out or crashed (``export_memos``)."""
        self._session.seed_memos(memos)

    def output(self) -> str:
        """The submission's captured stdout/stderr so far (truncated)."""
        return self._session.output()

    def import_errors(self) -> dict[str, str]:
        """``{module: message}`` for each submitted module that could not be imported."""
        return self._session.import_errors()

    def __repr__(self) -> str:
        return "<RemoteImplementation (sandboxed submission)>"

