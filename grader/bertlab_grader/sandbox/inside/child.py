"""The child side: one forked process per submission, which limits itself, imports the student's
modules (as ``submission.<name>``) and serves the trusted side's requests on a socket of its own."""

from __future__ import annotations

import builtins
import importlib
import importlib.abc
import importlib.util
import io
import os
import signal
import socket
import sys
import tempfile

from bertlab.tasks import EXERCISE_MODULES  # noqa: E402  (bertlab is shown in the sandbox)
import torch

from .rpc import REBUILT_EXCEPTIONS
from .copies import fresh_copy as _fresh_copy
from .confine import set_limits
from .reports import MESSAGE_LIMIT, student_visible_hooks, describe_exception



PACKAGE = "submission"          # student modules are submission.<name>, aliased as plain <name>
SOURCE_DIR = "/submission"      # fictional: tracebacks name the student's files, linecache asks us

PREBUILT: dict[str, object] = {}  # named models built by the template that sessions get copies of
# The kit's probes (bertlab/probes.py), captured by the template before any submitted code runs: a
# submission that replaces bertlab.probes.PROBES later changes nothing the grader calls.
PROBES: dict[str, object] = {}




class SubmissionFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the student's sources as ``submission.<name>`` and, as aliases, plain ``<name>``.

    Both spellings give the same module object, so ``from .pooling import f`` (how the stubs are
    written) and ``from pooling import f`` both work. A module that failed once fails again with the
    same error without running again.
    """

    def __init__(self, sources: dict[str, str], skip: dict[str, dict], on_import):
        self.sources = sources
        self.skip = skip
        self.on_import = on_import
        self.errors: dict[str, BaseException] = {}
        self._executed: set[str] = set()

    def _short(self, fullname: str):
        short = fullname.removeprefix(PACKAGE + ".") if fullname.startswith(PACKAGE + ".") else fullname
        return short if "." not in short and short in self.sources else None

    def find_spec(self, fullname, path=None, target=None):
        if fullname == PACKAGE:
            return importlib.util.spec_from_loader(fullname, self, origin=f"{SOURCE_DIR}/__init__.py",
                                                   is_package=True)
        short = self._short(fullname)
        if short is None or short == "__init__":
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=f"{SOURCE_DIR}/{short}.py")

    def create_module(self, spec):
        if spec.name != PACKAGE and not spec.name.startswith(PACKAGE + "."):
            return importlib.import_module(f"{PACKAGE}.{spec.name}")  # the alias shares the module
        return None

    def exec_module(self, module):
        name = module.__name__
        if name in self._executed:
            return
        short = "__init__" if name == PACKAGE else name.removeprefix(PACKAGE + ".")
        if short in self.errors:
            raise ImportError(f"{short}.py failed to import earlier") from self.errors[short]
        if short in self.skip:
            raise ImportError(f"{short}.py was not imported: {self.skip[short].get('message', '')}")
        if short not in self.sources:
            return  # the package itself without an __init__.py
        self._executed.add(name)
        self.on_import(short)
        module.__file__ = f"{SOURCE_DIR}/{short}.py"
        try:
            code = compile(self.sources[short], module.__file__, "exec", dont_inherit=True)
            exec(code, module.__dict__)
        except BaseException as exc:
            self.errors[short] = exc
            self._executed.discard(name)
            raise

    def reexecute(self, module) -> None:
        """Run a module's source again in its own namespace: ``importlib.reload`` for these modules
        (exec_module runs each module once, so that the plain-name alias does not run it twice).
        Used by bertlab.probes.substitute."""
        self._executed.discard(module.__name__)
        self.exec_module(module)

    def get_source(self, fullname):
        short = "__init__" if fullname == PACKAGE else self._short(fullname)
        return self.sources.get(short) if short else None


class _WorkerError(Exception):
    """A failure of the server's own (not the student's): carries the error dict to send."""

    def __init__(self, info: dict):
        super().__init__(info["message"])
        self.info = info


class CallbackStub:
    """Stands for a callable of the trusted process: calling it asks the trusted side to run it."""

    __slots__ = ("_server", "_cid")

    def __init__(self, server: "ChildServer", cid: int):
        self._server, self._cid = server, cid

    def __call__(self, *args, **kwargs):
        return self._server.callback(self._cid, args, kwargs)

    def __repr__(self):
        return f"<trusted callable #{self._cid}>"


class ChildServer:
    """Serves one submission: imports its modules, then answers call requests until told to stop."""

    def __init__(self, chan, nonce: str, sources: dict[str, str], skip: dict[str, dict],
                 eager: list[str] | None = None):
        from . import rpc

        self.rpc = rpc
        self.chan = chan
        self.nonce = nonce
        self.sources = {name[:-3]: text for name, text in sources.items()
                        if name.endswith(".py") and name[:-3].isidentifier()}
        self.student_files = {f"{SOURCE_DIR}/{name}.py" for name in self.sources}
        self.finder = SubmissionFinder(self.sources, skip, self._announce_import)
        # The modules imported before "ready" (None: every exercise module). A grading segment's
        # child imports only its tasks' modules (grader/bertlab_grader/grading/segments.py); another module of
        # the submission is imported when a request first names it.
        self.eager = set(EXERCISE_MODULES if eager is None else eager)
        self.modules: dict[str, object] = {}
        self.import_errors: dict[str, dict] = {}
        self.objects: dict[int, object] = {}
        self.models: dict[tuple, object] = {}
        self.stashed: dict[int, object] = {}  # values the trusted side sent once (Session.stash)
        self._next_stash = 1  # stash ids are never reused: a dropped one stays unknown
        self._next_handle = 1
        self._next_request = 1

    # ---- messages
    def send(self, header: dict, tensors=None) -> None:
        header["n"] = self.nonce
        self.chan.send(header, tensors)

    def recv(self):
        try:
            header, tensors = self.chan.recv()
        except Exception:
            os._exit(0)  # the trusted side went away: nothing left to do
        if header.get("n") != self.nonce:
            os._exit(3)
        return header, tensors

    def _announce_import(self, module: str) -> None:
        self.send({"op": "importing", "module": module})

    # ---- life cycle
    def serve(self) -> None:
        sys.meta_path.insert(0, self.finder)
        self.send({"op": "hello", "pid": os.getpid()})
        for name in EXERCISE_MODULES:
            if name in self.eager:
                self._import(name)
        self.send({"op": "ready", "modules": {n: self.import_errors.get(n) for n in self.sources
                                              if n in self.eager}})
        while True:
            header, tensors = self.recv()
            self.dispatch(header, tensors)
            # The frame's inputs go now, after the reply, while the trusted side reads it: held until the
            # next frame arrived, a large one's pages were freed inside the next call (6.5 ms measured).
            del header, tensors

    def _import(self, name: str) -> None:
        """Import the submission's module ``name`` once (its failure is kept as an import error)."""
        if name not in self.sources or name in self.finder.skip or name in self.modules or name in self.import_errors:
            return
        try:
            self.modules[name] = importlib.import_module(f"{PACKAGE}.{name}")
        except BaseException as exc:
            info = describe_exception(exc, self.student_files)
            info["message"] = f"{name}.py failed to import: {info['type']}: {info['message']}"[:MESSAGE_LIMIT]
            info["import"] = True
            self.import_errors[name] = info
        _flush_std()

    def dispatch(self, header: dict, tensors: dict) -> None:
        op = header.get("op")
        if op == "call":
            reply, out = self.handle_call(header, tensors)
            try:
                self.send(reply, out)
            except self.rpc.EncodeError as exc:
                self.send({"op": "reply", "id": header.get("id"), "ok": False,
                           "error": {"type": "ResultTooLarge", "builtin": None, "message": str(exc),
                                     "traceback": "", "fatal": False}})
            error = reply.get("error") or {}
            if error.get("fatal") and not error.get("import"):  # SystemExit & co. end the process
                os._exit(0)
        elif op == "stash":
            self.send(self.handle_stash(header, tensors))
        elif op == "bye":
            os._exit(0)
        else:
            os._exit(3)

    # ---- requests
    def handle_call(self, header: dict, tensors: dict):
        for hid in header.get("release") or ():
            self.objects.pop(hid, None)
        rid = header.get("id")
        try:
            decoder = self.rpc.Decoder(tensors, self._resolve)
            target = self._walk(header.get("target"), header.get("path"))
            if header.get("mode") == "get":
                result = target
            else:
                args = decoder.decode(header.get("args", []))
                kwargs = decoder.decode(header.get("kwargs", {"$t": "dict", "v": {}}))
                torch.set_grad_enabled(True)  # training-like tests need autograd
                # Arguments taken from the stash are fresh copies nobody else holds: no copy-back.
                watched = _snapshot_arrays(args, kwargs) if header.get("watch", True) else []
                result = target(*args, **kwargs)
            encoder = self.rpc.Encoder(fallback=self._to_handle)
            try:
                value = encoder.encode(result)
            except self.rpc.EncodeError:  # too deep or cyclic: keep the whole value here
                encoder = self.rpc.Encoder()
                value = self._to_handle(result)
            reply = {"op": "reply", "id": rid, "ok": True, "value": value}
            if header.get("mode") != "get":
                mutated = {key: obj for key, obj, before in watched if _changed(obj, before)}
                if mutated:  # in-place changes to arguments travel back, as they would in process
                    reply["mutated"] = {key: encoder.encode(obj) for key, obj in mutated.items()}
            return reply, encoder.tensors
        except _WorkerError as exc:
            return {"op": "reply", "id": rid, "ok": False, "error": exc.info}, None
        except BaseException as exc:
            return {"op": "reply", "id": rid, "ok": False,
                    "error": describe_exception(exc, self.student_files)}, None
        finally:
            _flush_std()

    def handle_stash(self, header: dict, tensors: dict) -> dict:
        """Keep a value here for later calls to use (as fresh copies): the performance task sends
        each timed call's inputs before the call is timed, not with it. The values listed in "drop"
        are forgotten first (the inputs of calls already made), so the stash holds one call's
        inputs at a time, not those of every call."""
        rid = header.get("id")
        for sid in header.get("drop") or ():
            self.stashed.pop(sid, None)
        try:
            value = self.rpc.Decoder(tensors).decode(header.get("value"))
        except Exception as exc:  # noqa: BLE001 - a garbled stash is refused, not fatal
            return {"op": "reply", "id": rid, "ok": False,
                    "error": {"type": "ProtocolError", "builtin": None, "message": str(exc)[:300],
                              "traceback": "", "fatal": False}}
        sid = self._next_stash
        self._next_stash += 1
        # Kept as a copy of its own: a large input arrives mapped from a memory file (rpc.py), and the
        # timed calls that copy it must read memory already in place, as the reference's side does,
        # not fault the file's pages in on the clock.
        self.stashed[sid] = _fresh_copy(value)
        return {"op": "reply", "id": rid, "ok": True, "value": sid}

    def _walk(self, target, path):
        obj = self._root(target)
        for name in path or ():
            obj = getattr(obj, str(name))
        return obj

    def _root(self, target):
        if isinstance(target, dict) and "module" in target:
            name = target["module"]
            if name in EXERCISE_MODULES and name not in self.eager:
                self._import(name)  # a module outside this segment's tasks, named for the first time
            if name in self.modules:
                return self.modules[name]
            raise _WorkerError(self.import_errors.get(name) or {
                "type": "ModuleNotFoundError", "builtin": None, "traceback": "", "fatal": False,
                "message": f"{name}.py is not part of the submission"})
        if isinstance(target, dict) and "probe" in target:
            if target["probe"] not in PROBES:
                raise self.rpc.ProtocolError(f"unknown probe {target['probe']!r}")
            return PROBES[target["probe"]]
        if isinstance(target, dict) and "handle" in target:
            if target["handle"] not in self.objects:
                raise _WorkerError({"type": "StaleHandle", "builtin": None, "traceback": "", "fatal": False,
                                    "message": "this object no longer exists in the server"})
            return self.objects[target["handle"]]
        raise self.rpc.ProtocolError("bad call target")

    def _resolve(self, tag: dict):
        kind = tag["$t"]
        if kind == "handle":
            return self._root({"handle": tag.get("id")})
        if kind == "callback":
            return CallbackStub(self, int(tag.get("id")))
        if kind == "model":
            # One server-side model per trusted-side model object (the trusted side numbers them), so
            # passing the same model twice gives the same object, and two fresh ones stay apart.
            key = (str(tag.get("name")), tag.get("key"))
            if key not in self.models:
                self.models[key] = _fresh_named_model(key[0])
            return self.models[key]
        if kind == "ref":
            return self._walk(tag.get("root"), tag.get("path"))
        if kind == "stash":
            if tag.get("id") not in self.stashed:
                raise _WorkerError({"type": "StaleStash", "builtin": None, "traceback": "", "fatal": False,
                                    "message": "this stashed value does not exist in the server"})
            # A fresh copy per call: the code under test may change it in place, or remember the
            # object it saw last, and neither must carry over to the next call (copies.py).
            return _fresh_copy(self.stashed[tag["id"]])
        raise self.rpc.ProtocolError(f"unknown tag {kind}")

    def _to_handle(self, obj) -> dict:
        if isinstance(obj, CallbackStub):
            return {"$t": "callback", "id": obj._cid}
        hid = self._next_handle
        self._next_handle += 1
        self.objects[hid] = obj
        cls = type(obj)
        return {"$t": "handle", "id": hid, "type": f"{cls.__module__}.{cls.__qualname__}"[:200]}

    # ---- calls back into the trusted process
    def callback(self, cid: int, args: tuple, kwargs: dict):
        rid = self._next_request
        self._next_request += 1
        encoder = self.rpc.Encoder(fallback=self._to_handle)
        header = {"op": "callback", "id": rid, "cb": cid,
                  "args": encoder.encode(list(args)), "kwargs": encoder.encode(dict(kwargs))}
        _flush_std()
        self.send(header, encoder.tensors)
        while True:  # the trusted callable may itself call into us: serve those calls meanwhile
            reply, tensors = self.recv()
            if reply.get("op") == "cbreply" and reply.get("id") == rid:
                if reply.get("ok"):
                    return self.rpc.Decoder(tensors, self._resolve).decode(reply.get("value"))
                error = reply.get("error") or {}
                name = error.get("builtin")
                cls = getattr(builtins, name) if name in REBUILT_EXCEPTIONS else RuntimeError
                raise cls(f"the grader's callable raised {error.get('type')}: {error.get('message')}")
            self.dispatch(reply, tensors)


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass


def child_main(job: dict, chan_fd: int, out_fd: int, job_dir: str) -> None:
    """The forked child: make it safe to run student code, then serve. Never returns."""
    import torch

    # FIRST, before any tensor work: the template's OpenMP thread pool does not survive fork, and
    # the child's first parallel op would wait for those threads forever.
    torch.set_num_threads(1)
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # Keep only our socket: the template's control socket and everything else it had open goes.
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd in _open_fds():
        if fd > 2 and fd != chan_fd:
            try:
                os.close(fd)
            except OSError:
                pass
    os.setsid()
    os.chdir(job_dir)
    os.environ["TMPDIR"] = job_dir
    tempfile.tempdir = None
    set_limits(job.get("limits") or {})
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), errors="backslashreplace",
                                  line_buffering=True, write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), errors="backslashreplace",
                                  line_buffering=True, write_through=True)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    student_visible_hooks()
    from .rpc import Channel

    ChildServer(Channel(socket.socket(fileno=chan_fd), accept_shared=True), job["nonce"], job.get("sources") or {},
                job.get("skip") or {}, job.get("eager")).serve()


def _open_fds() -> list[int]:
    try:
        return sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
    except OSError:
        return list(range(3, 1024))


def _fresh_named_model(name: str):
    """``bertlab.models.named_model(name)``; a copy of the template's own where it built one."""
    if name in PREBUILT:
        import copy

        return copy.deepcopy(PREBUILT[name])
    from bertlab.models import named_model

    return named_model(name)


#: How many elements of one list or tuple argument are watched for in-place changes (cka_matrix's
#: reps: one per layer): the first this many, one level deep.
WATCHED_ELEMENTS = 64


def _snapshot_arrays(args, kwargs) -> list:
    """(key, argument, copy) for every top-level tensor or ndarray argument, "a:<i>" or "k:<name>", and
    for every tensor or ndarray that is a direct element of a top-level list or tuple argument (its
    first WATCHED_ELEMENTS elements; nothing deeper): "a:<i>.<j>" or "k:<name>.<j>"."""
    import numpy as np

    def copy_of(obj):
        if isinstance(obj, torch.Tensor):
            return obj.detach().clone()
        if isinstance(obj, np.ndarray):
            return obj.copy()
        return None

    items = [(f"a:{i}", a) for i, a in enumerate(args)] + [(f"k:{k}", v) for k, v in kwargs.items()]
    out = []
    for key, obj in items:
        if isinstance(obj, (list, tuple)):
            try:  # (a list of the submission's own, passed back as a handle, may refuse to be sliced)
                elements = [(f"{key}.{j}", element) for j, element in enumerate(obj[:WATCHED_ELEMENTS])]
            except Exception:  # noqa: BLE001 - then its elements are not watched
                elements = []
        else:
            elements = [(key, obj)]
        for element_key, element in elements:
            before = copy_of(element)
            if before is not None:
                out.append((element_key, element, before))
    return out


def _changed(obj, before) -> bool:
    """Did the call modify this argument in place (values, shape or dtype; NaN equals NaN)?"""
    import numpy as np

    try:
        if isinstance(obj, torch.Tensor):
            now = obj.detach()
            if now.shape != before.shape or now.dtype != before.dtype:
                return True
            if torch.equal(now, before):  # one pass, the usual case: unchanged and no NaN
                return False
            if not (now.is_floating_point() or now.is_complex()):
                return True
            # NaN != NaN, so a tensor holding one is never torch.equal to itself: compare them apart.
            return not bool(torch.equal(now.nan_to_num(0.5), before.nan_to_num(0.5))
                            and torch.equal(now.isnan(), before.isnan()))
        return obj.shape != before.shape or obj.dtype != before.dtype or not np.array_equal(
            obj, before, equal_nan=obj.dtype.kind in "fc")
    except Exception:  # noqa: BLE001 - an argument the student broke counts as changed
        return True
