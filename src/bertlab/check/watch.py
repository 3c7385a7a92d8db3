"""`bertlab check --watch`: check every task once, then again the tasks a save affects, until Ctrl-C.

The watcher loads what every check needs once (warm.py), then shows, for each check, the same report
as `bertlab check` (command.check_once, with the warm checker's launcher) and records progress the
same way. Between checks it watches the exercises folder:

- **Which tasks.** A save of ``exercises/<task>.py`` checks that task again, and every task whose
  file imports the saved one, directly or through another file (affected.py): saving pooling.py
  checks pooling and siamese.
- **Save bursts.** Editors often write a file more than once per save (a temporary file then a
  rename, a formatter rewriting it): the check starts once the folder has been quiet for
  QUIET_SECONDS (at most BURST_SECONDS after the first change).
- **A save during a check** that affects a task stops that check and starts again with its tasks
  and the newly affected ones: the report is always of the files as they are now.
- **Stopping.** Ctrl-C (or SIGTERM, SIGHUP) stops the running check, kills everything it started,
  says one line and ends with 130 (143 for SIGTERM, 129 for SIGHUP).

Watching is a plain poll of the folder's ``*.py`` files (their size, modification time and inode)
every POLL_SECONDS, not inotify: the watcher forks a check from its own process, and a poll keeps
that process free of the background thread a notification library runs (a fork copies a thread's
locks but not the thread); it works the same on every file system (network and container mounts,
where inotify sees nothing); and noticing a save costs at most POLL_SECONDS (a few stat calls, too
few to measure against the second a check takes; benchmarks/check_watch_timing.py compares it with
watchfiles).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from bertlab.errors import UsageError
from bertlab.check import warm
from bertlab.check.affected import affected_tasks
from bertlab.check.command import check_once, resolve_target
from bertlab.check.run import CheckCancelled

POLL_SECONDS = 0.05   # how often the folder is looked at
QUIET_SECONDS = 0.1   # a save is complete once nothing changed for this long...
BURST_SECONDS = 1.0   # ...or this long after its first change


class Stopped(BaseException):
    """Raised in the watcher by SIGTERM or SIGHUP (like KeyboardInterrupt for Ctrl-C), to end it cleanly."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _stop_on_signal(signum, frame):
    raise Stopped(signum)


class ExerciseFiles:
    """The ``*.py`` files of the exercises folder, polled: what changed since the last look."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._seen = self._look()

    def _look(self) -> dict[str, tuple]:
        found = {}
        try:
            entries = list(os.scandir(self.folder))
        except OSError:
            return found
        for entry in entries:
            if not entry.name.endswith(".py") or entry.name.startswith("."):  # editors' lock files
                continue
            try:
                st = entry.stat()
            except OSError:
                continue
            found[entry.name] = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
        return found

    def changed(self) -> set[str]:
        """Names of the files written, added or removed since the last call."""
        now = self._look()
        names = {name for name in now.keys() | self._seen.keys() if now.get(name) != self._seen.get(name)}
        self._seen = now
        return names

    def settle(self, changed: set[str]) -> set[str]:
        """``changed`` and whatever else changes until the folder is quiet (the rest of a save burst)."""
        changed = set(changed)
        first = last = time.monotonic()
        while time.monotonic() - last < QUIET_SECONDS and time.monotonic() - first < BURST_SECONDS:
            time.sleep(POLL_SECONDS / 2)
            more = self.changed()
            if more:
                changed |= more
                last = time.monotonic()
        return changed

    def wait(self) -> set[str]:
        """Block until something changes, then until the save is complete; the names that changed."""
        while True:
            changed = self.changed()
            if changed:
                return self.settle(changed)
            time.sleep(POLL_SECONDS)


def watch_check(task: Optional[str] = None, impl: str = "exercises", verbose: bool = False,
                root: Optional[Path] = None, stream=None, directory: Optional[Path] = None) -> int:
    """`bertlab check --watch [--task T] [--dir DIR] [-v]`: runs until stopped; 130 after Ctrl-C."""
    root, tasks, impl, own_work = resolve_target(task, impl, root, directory)
    if impl == "reference":
        raise UsageError("--watch checks a folder of exercise files again when you save one; the reference "
                         "solutions are not such a folder. Use --dir to name your exercises folder.")
    folder = root / "exercises" if impl == "exercises" else Path(impl).resolve()
    return Watcher(root, folder, tasks, impl, own_work, verbose, stream).run()


class Watcher:
    """One `bertlab check --watch` session (see the module's docstring)."""

    def __init__(self, root: Path, folder: Path, tasks: Sequence[str], impl: str, own_work: bool,
                 verbose: bool, stream=None):
        self.root, self.folder, self.tasks, self.impl = root, folder, list(tasks), impl
        self.own_work, self.verbose, self.stream = own_work, verbose, stream
        self.launch = None              # the warm checker's launcher; None: a fresh Python per check
        self.files: Optional[ExerciseFiles] = None
        self._unseen: set[str] = set()  # changes noticed while a check ran
        self._running: list[str] = []   # the tasks of the check that runs now
        self._looked = 0.0

    def say(self, text: str) -> None:
        out = self.stream or sys.stdout
        try:
            out.write(text + "\n")
            out.flush()
        except OSError:  # the reader left (a closed pipe, a closed terminal): nothing to tell
            pass

    @property
    def folder_shown(self) -> str:
        """The exercises folder as the student would type it: 'exercises' inside the workspace."""
        try:
            inside = self.folder.relative_to(self.root).as_posix()
        except ValueError:
            return self.folder.name
        return self.folder.name if inside == "." else inside  # a folder that is its own workspace

    def shown(self, names) -> str:
        """'exercises/cka.py, exercises/pooling.py'."""
        return ", ".join(f"{self.folder_shown}/{name}" for name in sorted(names))

    def run(self) -> int:
        handlers = {sig: signal.signal(sig, _stop_on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
        # Ctrl-C stops the watcher, as it says, also where it was started with SIGINT ignored (a
        # shell's background job, a script run with `&`): Python then never raises KeyboardInterrupt.
        handlers[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            self.say("bertlab check --watch: getting ready, once (a few seconds):")
            checker = warm.prepare(self.say, self.folder)
            self.launch = checker.launch if checker is not None else None
            self.files = ExerciseFiles(self.folder)  # before the first check: a save during it is seen
            self._loop()
        except KeyboardInterrupt:
            self.say(f"\nStopped watching {self.folder_shown}/.")
            return 130
        except Stopped as stop:
            self.say(f"\nStopped watching {self.folder_shown}/ ({signal.Signals(stop.signum).name}).")
            return 128 + stop.signum
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        return 0  # not reached: the loop ends only when stopped

    def _loop(self) -> None:
        pending = list(self.tasks)
        while True:
            self._running = pending
            try:
                check_once(self.root, pending, self.impl, own_work=self.own_work, verbose=self.verbose,
                           stream=self.stream, launch=self.launch, interrupted=self._newer_save)
            except CheckCancelled:  # a file this check uses changed: start again, with what it affects too
                changed = self.files.settle(self._unseen)
                self._unseen = set()
                again = set(pending) | set(affected_tasks(changed, self.folder, self.tasks))
                pending = [t for t in self.tasks if t in again]
                self.say(f"\n{self.shown(changed)} changed during the check: checking {', '.join(pending)} again.")
                continue
            changed = self.files.settle(self._unseen) if self._unseen else set()  # saves the check did not use
            self._unseen = set()
            pending = affected_tasks(changed, self.folder, self.tasks) if changed else []
            if not pending:
                self.say(f"\nWatching {self.folder_shown}/ for saves (each checks again the tasks that use the "
                         "file); Ctrl-C to stop.")
            while not pending:
                changed = self.files.wait()
                pending = affected_tasks(changed, self.folder, self.tasks)
                if not pending:
                    self.say(f"({self.shown(changed)} changed; no task of this check uses it.)")
            self.say(f"\n--- {time.strftime('%H:%M:%S')} {self.shown(changed)} saved: checking "
                     f"{', '.join(pending)} ---")

    def _newer_save(self) -> bool:
        """Asked by the running check: has a file it uses changed since it started?"""
        now = time.monotonic()
        if now - self._looked < POLL_SECONDS:
            return False
        self._looked = now
        self._unseen |= self.files.changed()
        return bool(self._unseen) and bool(set(affected_tasks(self._unseen, self.folder, self.tasks))
                                           & set(self._running))
