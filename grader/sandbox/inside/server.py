"""The sandboxed side of grading: a warm template that forks one fresh child per submission.

Started by ../launcher.py (inside bubblewrap when it works) as a module of this folder, which the
sandbox mounts alone under the package name ``bertlab_sandbox``::

    python -s -B -m bertlab_sandbox.server --control-fd N --kit-root DIR [--uid U] [--isolated] [--preload minilm]

The template pays the set-up once (torch, transformers, numpy, bertlab, the named models it preloads,
one warm-up forward), then waits for jobs on its control socket. Each job (one submission's sources)
runs in a child forked from it: the child limits itself, imports the student's modules and serves the
trusted side's requests (grader/sandbox/inside/rpc.py frames) on a socket of its own. When the job ends the
template kills every other process it can see and wipes the writable scratch space, so nothing one
student leaves behind reaches the next.

This file runs student code's neighbours: it imports nothing of the kit but its sibling ``rpc``
(relatively: the package's name differs inside the sandbox and out) and the student package
``bertlab``; this folder and ``bertlab`` are the only kit paths the sandbox shows.
"""

from __future__ import annotations

import argparse
import builtins
import ctypes
import importlib
import importlib.abc
import importlib.util
import io
import os
import resource
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback

from bertlab.tasks import EXERCISE_MODULES  # noqa: E402  (bertlab is shown in the sandbox)

from .rpc import REBUILT_EXCEPTIONS  # noqa: E402

PACKAGE = "submission"          # student modules are submission.<name>, aliased as plain <name>
SOURCE_DIR = "/submission"      # fictional: tracebacks name the student's files, linecache asks us
MESSAGE_LIMIT = 2000
TRACEBACK_LIMIT = 4000

torch = None  # imported by main(), after the switch to the unprivileged uid

_PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS = 4, 24, 36, 38
_libc = ctypes.CDLL(None, use_errno=True)
_PREBUILT: dict[str, object] = {}  # named models built by the template that sessions get copies of
# The kit's probes (bertlab/probes.py), captured by the template before any submitted code runs: a
# submission that replaces bertlab.probes.PROBES later changes nothing the grader calls.
_PROBES: dict[str, object] = {}


def _prctl(option: int, arg: int) -> int:
    return _libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def drop_privileges(uid: int) -> None:
    """From root to ``uid`` for good: no groups, no capabilities, no way back (no_new_privs)."""
    if os.geteuid() != 0:
        return
    for cap in range(64):  # empty the bounding set while we still may
        _prctl(_PR_CAPBSET_DROP, cap)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise SystemExit("sandboxed server: could not drop root privileges")


# ================================================================================ the child side

# (prefix, replacement) pairs, longest prefix first: the sandbox-side folders of the kit and the
# Python install. Text the server writes for the student (exception messages, the tracebacks and
# warnings it prints) names files relative to them ("torch/nn/functional.py", "bertlab/models.py"):
# a student sees where in a library something failed, not how the grading machine is laid out.
_PATH_PREFIXES: list[tuple[str, str]] = []


def path_prefixes(kit_roots) -> list[tuple[str, str]]:
    """The (prefix, replacement) pairs for ``kit_roots`` and this Python (see ``scrub_paths``)."""
    import site
    import sysconfig

    found: dict[str, str] = {}
    folders = [*kit_roots, *site.getsitepackages(), sysconfig.get_paths().get("stdlib") or "",
               sysconfig.get_paths().get("platstdlib") or "", os.path.dirname(os.path.abspath(__file__))]
    folders += [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    for folder in folders:
        if folder and folder != "/":
            for variant in {folder.rstrip("/"), os.path.realpath(folder)}:
                found[variant + "/"] = ""
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        if prefix and prefix != "/":
            for variant in {prefix.rstrip("/"), os.path.realpath(prefix)}:
                found.setdefault(variant + "/", "<python>/")
                found.setdefault(variant, "<python>")
    return sorted(found.items(), key=lambda kv: -len(kv[0]))


def scrub_paths(text: str, prefixes=None) -> str:
    """``text`` with the sandbox-side folders of the kit and the Python install cut off."""
    for prefix, replacement in _PATH_PREFIXES if prefixes is None else prefixes:
        if prefix in text:
            text = text.replace(prefix, replacement)
    return text


def short_traceback(exc: BaseException) -> str:
    """A traceback for the student's output: every frame by file name only (``server.py``,
    ``cka.py``, ``functional.py``), never the sandbox-side path of the kit or the Python install."""
    lines = ["Traceback (most recent call last):\n"]
    try:
        for f in traceback.extract_tb(exc.__traceback__):
            lines.append(f'  File "{os.path.basename(f.filename)}", line {f.lineno}, in {f.name}\n')
        lines.append(scrub_paths("".join(traceback.format_exception_only(type(exc), exc))))
    except BaseException:
        lines.append(f"{type(exc).__name__}\n")
    return "".join(lines)


def _student_visible_hooks() -> None:
    """In a child: what Python prints by itself (an uncaught exception in a thread, a warning) names
    files without their sandbox-side folders, like the server's own reports."""
    import threading
    import warnings

    def thread_hook(args):
        if args.exc_type is SystemExit:
            return
        name = getattr(args.thread, "name", "?")
        try:
            sys.stderr.write(f"Exception in thread {name}:\n{short_traceback(args.exc_value)}")
        except BaseException:
            pass

    original = warnings.formatwarning

    def formatwarning(message, category, filename, lineno, line=None):
        return scrub_paths(original(message, category, filename, lineno, line))

    threading.excepthook = thread_hook
    sys.excepthook = lambda typ, value, tb: sys.stderr.write(short_traceback(value))
    warnings.formatwarning = formatwarning


def describe_exception(exc: BaseException, student_files: set[str]) -> dict:
    """What the trusted side may see of a student exception: type, message, the student's frames."""
    try:
        message = str(exc)
    except BaseException:  # a student __str__ may raise anything
        message = "<unprintable exception message>"
    if not isinstance(message, str):
        message = "<unprintable exception message>"
    builtin = next((c.__name__ for c in type(exc).__mro__
                    if c.__module__ == "builtins" and c.__name__ in REBUILT_EXCEPTIONS), None)
    try:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in student_files]
        lines = [f'  File "{os.path.basename(f.filename)}", line {f.lineno}, in {f.name}\n'
                 + (f"    {f.line}\n" if f.line else "") for f in frames]
    except BaseException:
        lines = []
    tb = "".join(lines)
    return {"type": str(type(exc).__name__)[:200], "builtin": builtin,
            "message": scrub_paths(message)[:MESSAGE_LIMIT], "traceback": tb[-TRACEBACK_LIMIT:],
            "fatal": not isinstance(exc, Exception)}


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

    def __init__(self, chan, nonce: str, sources: dict[str, str], skip: dict[str, dict]):
        from . import rpc

        self.rpc = rpc
        self.chan = chan
        self.nonce = nonce
        self.sources = {name[:-3]: text for name, text in sources.items()
                        if name.endswith(".py") and name[:-3].isidentifier()}
        self.student_files = {f"{SOURCE_DIR}/{name}.py" for name in self.sources}
        self.finder = SubmissionFinder(self.sources, skip, self._announce_import)
        self.modules: dict[str, object] = {}
        self.import_errors: dict[str, dict] = {}
        self.objects: dict[int, object] = {}
        self.models: dict[tuple, object] = {}
        self.stashed: dict[int, object] = {}  # values the trusted side sent once (Session.stash)
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
            if name not in self.sources or name in self.finder.skip:
                continue
            try:
                self.modules[name] = importlib.import_module(f"{PACKAGE}.{name}")
            except BaseException as exc:
                info = describe_exception(exc, self.student_files)
                info["message"] = f"{name}.py failed to import: {info['type']}: {info['message']}"[:MESSAGE_LIMIT]
                info["import"] = True
                self.import_errors[name] = info
            _flush_std()
        self.send({"op": "ready", "modules": {n: self.import_errors.get(n) for n in self.sources
                                              if n in EXERCISE_MODULES}})
        while True:
            header, tensors = self.recv()
            self.dispatch(header, tensors)

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
        its inputs once instead of with every timed call."""
        rid = header.get("id")
        try:
            value = self.rpc.Decoder(tensors).decode(header.get("value"))
        except Exception as exc:  # noqa: BLE001 - a garbled stash is refused, not fatal
            return {"op": "reply", "id": rid, "ok": False,
                    "error": {"type": "ProtocolError", "builtin": None, "message": str(exc)[:300],
                              "traceback": "", "fatal": False}}
        sid = len(self.stashed) + 1
        self.stashed[sid] = value
        return {"op": "reply", "id": rid, "ok": True, "value": sid}

    def _walk(self, target, path):
        obj = self._root(target)
        for name in path or ():
            obj = getattr(obj, str(name))
        return obj

    def _root(self, target):
        if isinstance(target, dict) and "module" in target:
            name = target["module"]
            if name in self.modules:
                return self.modules[name]
            raise _WorkerError(self.import_errors.get(name) or {
                "type": "ModuleNotFoundError", "builtin": None, "traceback": "", "fatal": False,
                "message": f"{name}.py is not part of the submission"})
        if isinstance(target, dict) and "probe" in target:
            if target["probe"] not in _PROBES:
                raise self.rpc.ProtocolError(f"unknown probe {target['probe']!r}")
            return _PROBES[target["probe"]]
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
            # object it saw last, and neither must carry over to the next call.
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


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _set_limits(limits: dict) -> None:
    """Per-child rlimits. RLIMIT_AS counts from what the fork inherited: the budget is extra."""
    mb = 1024 * 1024
    wanted = {
        resource.RLIMIT_AS: _vm_size() + int(limits.get("memory_mb", 3072)) * mb,
        resource.RLIMIT_CPU: int(limits.get("cpu_s", 600)),
        resource.RLIMIT_FSIZE: int(limits.get("fsize_mb", 16)) * mb,
        resource.RLIMIT_NPROC: int(limits.get("nproc", 256)),
        resource.RLIMIT_CORE: 0,
    }
    for which, soft in wanted.items():
        _, hard = resource.getrlimit(which)
        # The hard CPU limit a bit above the soft one: SIGXCPU first, SIGKILL if it is caught.
        new_hard = soft + 5 if which == resource.RLIMIT_CPU else soft
        if hard != resource.RLIM_INFINITY:
            soft, new_hard = min(soft, hard), min(new_hard, hard)
        try:
            resource.setrlimit(which, (soft, new_hard))
        except (ValueError, OSError):
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
    _set_limits(job.get("limits") or {})
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), errors="backslashreplace",
                                  line_buffering=True, write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), errors="backslashreplace",
                                  line_buffering=True, write_through=True)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    _student_visible_hooks()
    from .rpc import Channel

    ChildServer(Channel(socket.socket(fileno=chan_fd)), job["nonce"], job.get("sources") or {},
                job.get("skip") or {}).serve()


def _open_fds() -> list[int]:
    try:
        return sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
    except OSError:
        return list(range(3, 1024))


# ============================================================================= the template side

class Template:
    """The warm parent: forks a child per job and cleans up after it."""

    def __init__(self, ctrl_sock: socket.socket, isolated: bool, scratch: str):
        from .rpc import Channel

        self.ctrl = Channel(ctrl_sock)
        self.isolated = isolated
        self.scratch = scratch
        self.job = None          # (job id, child pid, job dir)
        self.reported: set[int] = set()
        self._wake_r, wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self._template_fds = {self._wake_r, wake_w, ctrl_sock.fileno()}

    def serve(self, ready: dict) -> None:
        self.ctrl.send(ready)
        while True:
            readable, _, _ = select.select([self.ctrl, self._wake_r], [], [], 1.0)
            if self._wake_r in readable:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            self.reap()
            if self.ctrl in readable:
                try:
                    msg, _ = self.ctrl.recv()
                except Exception:
                    self.end_job()
                    return  # the trusted side is gone or confused: exit, it will start a fresh one
                op = msg.get("op")
                if op == "start":
                    self.start_job(msg)
                elif op == "end":
                    self.end_job()
                    self.ctrl.send({"op": "ended", "job": msg.get("job")})
                elif op == "ping":
                    self.ctrl.send({"op": "pong"})
                elif op == "exit":
                    self.end_job()
                    return

    def start_job(self, msg: dict) -> None:
        _, fds, _, _ = socket.recv_fds(self.ctrl.sock, 1, 2)
        self.end_job()
        job_dir = self._new_job_dir()
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                child_main(msg, fds[0], fds[1], job_dir)
                code = 0
            except BaseException as exc:
                try:  # fd 2 is the student's output by now: file names only
                    sys.stderr.write(short_traceback(exc))
                    sys.stderr.flush()
                except BaseException:
                    pass
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        self.job = (msg.get("job"), pid, job_dir)
        self.ctrl.send({"op": "started", "job": msg.get("job"), "pid": pid})

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.job and pid == self.job[1] and self.job[0] not in self.reported:
                self.reported.add(self.job[0])
                self.ctrl.send({"op": "exited", "job": self.job[0],
                                "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None})

    def end_job(self) -> None:
        """Kill the child and everything it started; wipe the scratch space."""
        if self.job is None:
            return
        _, pid, job_dir = self.job
        try:
            os.killpg(pid, signal.SIGKILL)  # the child's session (it made itself a leader)
        except OSError:
            pass
        kill_everything_else(self.isolated)
        self.reap()
        self.job = None
        if self.isolated:
            _wipe(self.scratch)
            _remove_sysv_ipc()
        else:
            shutil.rmtree(job_dir, ignore_errors=True)

    def _new_job_dir(self) -> str:
        if self.isolated:
            path = os.path.join(self.scratch, "job")
            os.makedirs(path, mode=0o700, exist_ok=True)
            return path
        return tempfile.mkdtemp(prefix="bertlab-job-", dir=self.scratch)


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, state) for every process visible in /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        table[int(entry)] = (int(fields[1]), fields[0])
    return table


def kill_everything_else(isolated: bool, rounds: int = 200) -> None:
    """SIGKILL every process but ourselves (and the namespace's init), until none is left.

    In the sandbox's own pid namespace that is everything we can signal: ``kill(-1)`` reaches them in
    one call, so a fork bomb cannot outrun it. Without a namespace we are a child subreaper, so every
    process a job started is still our descendant: kill that tree.
    """
    me = os.getpid()
    for _ in range(rounds):
        table = _proc_table()
        if isolated:
            victims = [p for p, (_, state) in table.items() if p not in (1, me) and state != "Z"]
            if victims:
                try:
                    os.kill(-1, signal.SIGKILL)
                except OSError:
                    pass
        else:
            children: dict[int, list[int]] = {}
            for pid, (ppid, _) in table.items():
                children.setdefault(ppid, []).append(pid)
            victims, stack = [], list(children.get(me, ()))
            while stack:
                pid = stack.pop()
                if table[pid][1] != "Z":
                    victims.append(pid)
                stack.extend(children.get(pid, ()))
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        _reap_all()
        if not victims:
            return
        time.sleep(0.005)


def _reap_all() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _remove_sysv_ipc() -> None:
    """Delete the System V shared memory, queues and semaphores a job left in our IPC namespace
    (a channel between two students otherwise: it outlives the processes that made it)."""
    _IPC_RMID = 0
    for kind, remove in (("shm", lambda i: _libc.shmctl(i, _IPC_RMID, None)),
                         ("msg", lambda i: _libc.msgctl(i, _IPC_RMID, None)),
                         ("sem", lambda i: _libc.semctl(i, 0, _IPC_RMID))):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                ids = [int(line.split()[1]) for line in f.readlines()[1:] if line.split()]
        except (OSError, ValueError, IndexError):
            continue
        for ipc_id in ids:
            remove(ipc_id)


def _wipe(directory: str) -> None:
    """Empty ``directory`` (the sandbox's private /tmp), whatever modes the job left behind."""
    def fix_and_retry(func, path, _exc):
        try:
            os.chmod(os.path.dirname(path) or path, 0o700)
            os.chmod(path, 0o700)
            func(path)
        except OSError:
            pass

    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, onerror=fix_and_retry)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


# ================================================================================== start-up

def _own_pid_namespace() -> bool:
    """Are we inside the sandbox's pid namespace (init is bwrap) and unprivileged there?"""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            init = f.read().split(b"\0")[0]
    except OSError:
        return False
    return os.path.basename(init) == b"bwrap" and os.getpid() != 1 and os.geteuid() != 0


def _drop_kit_editable_finders() -> None:
    """Remove the import hooks of an editable install of the kit (setuptools' ``__editable___*_finder``).

    They map ``bertlab`` and ``bertlab_grader`` (its reference and suites inside) to the kit's
    folders, most of which the sandbox hides; probing those paths can raise PermissionError (a template that cannot import) and puts
    kit paths into a student's error messages. The launcher passes the kit's import roots
    (``--kit-root``) for what the server needs, so these hooks add nothing. Editable installs of
    other projects (a developer's transformers, say) keep theirs.
    """
    kit = {"bertlab", "bertlab_grader"}

    def of_kit(obj) -> bool:
        owner = getattr(obj, "__self__", obj)  # a path hook is a bound classmethod
        module = sys.modules.get(getattr(owner, "__module__", "") or "")
        name = getattr(module, "__name__", "") or ""
        return name.startswith("__editable__") and bool(kit & set(getattr(module, "MAPPING", {}) or {}))

    sys.meta_path[:] = [f for f in sys.meta_path if not of_kit(f)]
    sys.path_hooks[:] = [h for h in sys.path_hooks if not of_kit(h)]
    sys.path_importer_cache.clear()


def check_mounts() -> int:
    """The launcher's check of its mounts (``--check-mounts``): run as the template would (same uid, same
    sys.path), find and read what the template imports, without paying for importing it."""
    try:
        for name in ("numpy", "torch", "transformers", "safetensors", "bertlab", "bertlab.models", f"{__package__}.rpc"):
            spec = importlib.util.find_spec(name)
            if spec is None:
                raise ImportError(f"no module named {name!r} in the sandbox (sys.path: {sys.path})")
            if spec.origin and os.path.isabs(spec.origin):
                with open(spec.origin, "rb") as f:
                    f.read(1)
        with open(os.path.abspath(__file__), "rb") as f:
            f.read(1)
    except Exception:
        traceback.print_exc()
        return 1
    return 0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--control-fd", type=int)
    parser.add_argument("--check-mounts", action="store_true",
                        help="check that what the template imports can be found and read, then exit")
    parser.add_argument("--kit-root", action="append", default=[])
    parser.add_argument("--uid", type=int)
    parser.add_argument("--isolated", action="store_true")
    parser.add_argument("--preload", action="append", default=[])
    args = parser.parse_args(argv)
    if args.control_fd is None and not args.check_mounts:
        parser.error("--control-fd is required")
    started = time.monotonic()
    if args.uid is not None:
        drop_privileges(args.uid)
    _prctl(_PR_SET_DUMPABLE, 0)       # no ptrace, no /proc/<pid>/mem or fd access for children
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)  # orphans of a job stay ours to kill
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGALRM):
        signal.signal(sig, signal.SIG_IGN)  # a job may signal us; only SIGKILL/SIGSTOP get through
    # ``-m`` put the working directory first on sys.path (/tmp in the sandbox, writable by the jobs):
    # imports come from the kit roots and the Python install only.
    here = {"", os.getcwd(), os.path.dirname(os.path.abspath(__file__))}
    sys.path[:] = [p for p in sys.path if p not in here]
    for root in reversed(args.kit_root):
        sys.path.insert(0, root)
    _drop_kit_editable_finders()
    _PATH_PREFIXES[:] = path_prefixes(args.kit_root)
    if args.check_mounts:
        raise SystemExit(check_mounts())
    ctrl = socket.socket(fileno=args.control_fd)

    global torch
    import numpy  # noqa: F401  (warm: every submission uses these)
    import torch
    import torch.nn.functional  # noqa: F401
    import transformers  # noqa: F401
    import safetensors.torch  # noqa: F401
    from . import rpc  # noqa: F401
    from bertlab import probes

    _PROBES.update(probes.PROBES)

    try:
        import jaxtyping  # noqa: F401  (the stubs' annotations)
    except ImportError:
        pass
    warnings = []
    for name in args.preload:
        try:
            from bertlab.models import named_model

            model = named_model(name)
            ids = torch.tensor([[101, 7592, 2088, 102]])
            with torch.no_grad():  # one forward warms the kernels every child will use
                model(input_ids=ids, attention_mask=torch.ones_like(ids))
            if name != "minilm":  # MiniLM is shared by named_model itself; the others are fresh per call
                _PREBUILT[name] = model
        except Exception as exc:
            warnings.append(f"could not preload {name!r}: {type(exc).__name__}: {exc}")
    if args.isolated and not _own_pid_namespace():
        warnings.append("--isolated given outside a bubblewrap pid namespace: cleaning up by process tree")
        args.isolated = False  # kill(-1) and wiping /tmp are only safe inside our own namespace
    scratch = "/tmp" if args.isolated else tempfile.gettempdir()
    if args.isolated:
        _wipe(scratch)
    ready = {"op": "ready", "pid": os.getpid(), "uid": os.getuid(), "isolated": args.isolated,
             "setup_s": round(time.monotonic() - started, 3), "threads": torch.get_num_threads(),
             "warnings": warnings}
    Template(ctrl, args.isolated, scratch).serve(ready)


def _fresh_copy(value):
    """A copy of a stashed value: tensors and arrays cloned, containers rebuilt, the rest as is."""
    import numpy as np

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (list, tuple)):
        items = [_fresh_copy(v) for v in value]
        return type(value)(items) if type(value) in (list, tuple) else items
    if isinstance(value, dict):
        return {k: _fresh_copy(v) for k, v in value.items()}
    return value


def _fresh_named_model(name: str):
    """``bertlab.models.named_model(name)``; a copy of the template's own where it built one."""
    if name in _PREBUILT:
        import copy

        return copy.deepcopy(_PREBUILT[name])
    from bertlab.models import named_model

    return named_model(name)


def _snapshot_arrays(args, kwargs) -> list:
    """(key, argument, copy) for every top-level tensor or ndarray argument: "a:<i>" or "k:<name>"."""
    import numpy as np

    items = [(f"a:{i}", a) for i, a in enumerate(args)] + [(f"k:{k}", v) for k, v in kwargs.items()]
    out = []
    for key, obj in items:
        if isinstance(obj, torch.Tensor):
            out.append((key, obj, obj.detach().clone()))
        elif isinstance(obj, np.ndarray):
            out.append((key, obj, obj.copy()))
    return out


def _changed(obj, before) -> bool:
    """Did the call modify this argument in place (values, shape or dtype; NaN equals NaN)?"""
    import numpy as np

    try:
        if isinstance(obj, torch.Tensor):
            now = obj.detach()
            if now.shape != before.shape or now.dtype != before.dtype:
                return True
            if now.is_floating_point() or now.is_complex():
                return not bool(torch.equal(now.nan_to_num(0.5), before.nan_to_num(0.5))
                                and torch.equal(now.isnan(), before.isnan()))
            return not torch.equal(now, before)
        return obj.shape != before.shape or obj.dtype != before.dtype or not np.array_equal(
            obj, before, equal_nan=obj.dtype.kind in "fc")
    except Exception:  # noqa: BLE001 - an argument the student broke counts as changed
        return True


if __name__ == "__main__":
    main()

