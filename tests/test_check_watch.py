"""`bertlab check --watch` and the guarded checks: real watchers in a released student bundle, then
the pieces (which tasks a save affects, the file poll, the guard, the warm checker's fork) on their own.

A watcher is `python -m bertlab.cli check --watch` in the bundle, its output read line by line as a
student would see it (plain text: a pipe). Each watcher loads torch once (seconds), so each test
drives one watcher through several saves. Processes are counted by a token in their environment:
every process a watcher starts (its guards, checks, and what student code starts) inherits it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from bertlab.check import guard
from bertlab.check.events import TIMEOUT_ENV
from bertlab.check.affected import affected_tasks, local_imports
from bertlab.check.watch import ExerciseFiles
from bertlab_grader.core.locations import REFERENCE_DIR

TASKS = ("cka", "pooling", "siamese", "retrieval")
TOKEN_ENV = "BERTLAB_WATCH_TEST_TOKEN"

pytestmark = pytest.mark.skipif(not guard.supported(), reason="the warm checker and the guard are Linux-only")


def student_environ(bundle: Path, **env: str) -> dict:
    """The environment of a student's `bertlab` in the bundle: the bundle's own bertlab package first
    on the path, the instructor package shadowed (as tests/test_check.py does)."""
    shadow = bundle.parent / "shadow"
    (shadow / "bertlab_grader").mkdir(parents=True, exist_ok=True)
    (shadow / "bertlab_grader" / "__init__.py").write_text("raise ModuleNotFoundError(name='bertlab_grader')\n")
    environ = {k: v for k, v in os.environ.items() if k not in (TIMEOUT_ENV, "NO_COLOR", TOKEN_ENV)}
    environ.update(PYTHONPATH=os.pathsep.join([str(bundle / "src"), str(shadow)]), HF_HUB_OFFLINE="1", **env)
    return environ


def use_solution(bundle: Path, *tasks: str) -> None:
    for task in tasks:
        shutil.copy(REFERENCE_DIR / f"{task}.py", bundle / "exercises" / f"{task}.py")


def replace_in_stub(text: str, task: str, function: str, code: str) -> str:
    stub = f'raise NotImplementedYet("{task}", "{function}")'
    assert stub in text
    return text.replace(stub, code, 1)


def stub_with(bundle: Path, task: str, function: str, code: str) -> str:
    """The (released, untouched) stub of ``task`` in ``bundle`` with ``function``'s body replaced by
    ``code``; not written."""
    return replace_in_stub((bundle / "exercises" / f"{task}.py").read_text(), task, function, code)


def save(path: Path, text: str) -> None:
    """Save as an editor does: a temporary file renamed over the old one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Watcher:
    """A running `bertlab check --watch` in a bundle, read line by line."""

    def __init__(self, bundle: Path, *args: str, **env: str):
        self.token = uuid.uuid4().hex
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bertlab.cli", "check", "--watch", *args], cwd=bundle,
            env=student_environ(bundle, **{TOKEN_ENV: self.token}, **env), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,  # its own group: a terminal's Ctrl-C
            # Started with SIGINT ignored, as a shell's background job starts its children (CI may run
            # the suite so): Python then never raises KeyboardInterrupt by itself, and the watcher,
            # which says "Ctrl-C to stop", must still stop on it (a fresh clone's suite, run in the
            # background, failed here: the watcher slept on through SIGINT).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.mark = 0
        self._lock = threading.Lock()
        for stream, into in ((self.proc.stdout, self.lines), (self.proc.stderr, self.errors)):
            threading.Thread(target=self._read, args=(stream, into), daemon=True).start()

    def _read(self, stream, into) -> None:
        for line in stream:
            with self._lock:
                into.append(line.rstrip("\n"))

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 180) -> str:
        """The output after the mark up to and including the first line matching ``pattern``; the
        mark moves past it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                for index in range(self.mark, len(self.lines)):
                    if re.search(pattern, self.lines[index]):
                        found = "\n".join(self.lines[self.mark:index + 1])
                        self.mark = index + 1
                        return found
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the readers finish
                with self._lock:
                    if not any(re.search(pattern, line) for line in self.lines[self.mark:]):
                        break
                continue
            time.sleep(0.02)
        raise AssertionError(f"no line matching {pattern!r} (exit {self.proc.poll()}); output:\n"
                             f"{self.text()}\nstderr:\n" + "\n".join(self.errors))

    def next_report(self, timeout: float = 180) -> str:
        """Everything up to the line saying the watcher waits for the next save."""
        return self.wait_for(r"^Watching exercises/ for saves", timeout)

    def stop(self, sig: int = signal.SIGINT, timeout: float = 60) -> int:
        os.killpg(self.proc.pid, sig)  # as a terminal does: to the whole foreground group
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the watcher did not end within {timeout:g} s of {signal.Signals(sig).name}; "
                                 f"{where_it_waits(self.proc.pid)}; its output:\n{self.text()}\nstderr:\n"
                                 + "\n".join(self.errors)) from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def where_it_waits(pid: int) -> str:
    """Each thread of ``pid`` with its state and the kernel function it sleeps in (for a hang's message)."""
    threads = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int) if os.path.isdir(f"/proc/{pid}/task") else ():
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            wchan = Path(f"/proc/{pid}/task/{tid}/wchan").read_text()
        except OSError:
            continue
        threads.append(f"{tid} {stat[stat.rfind(')') + 2:].split()[0]} {wchan or '-'}")
    return "threads: " + ", ".join(threads) if threads else "no process left"


def processes_with(token: str) -> list[int]:
    """Live processes whose environment holds ``token``: every process of a watcher's run."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read()
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue
        if token.encode() in environ and stat[stat.rfind(")") + 2:].split()[0] != "Z":
            found.append(int(entry))
    return found


def wait_until_gone(token: str, timeout: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = processes_with(token)
        if not left:
            return []
        time.sleep(0.1)
    return processes_with(token)


def without_timings(report: str) -> str:
    """A report without what differs between two runs of the same files: the seconds it took and the
    recorded progress (timestamps, counts of runs)."""
    lines, out, in_progress = report.splitlines(), [], False
    for line in lines:
        if line.startswith("Progress:"):
            in_progress = True
            continue
        if in_progress and (line.startswith("  ") or not line.strip()):
            in_progress = bool(line.strip())
            if not in_progress:
                out.append(line)
            continue
        in_progress = False
        out.append(re.sub(r"; \d+\.\d s\)$", "; N s)", line))
    return "\n".join(out).strip()


def report_of(text: str) -> str:
    """The check's report in a watcher's output (from its header line to its verdict)."""
    start = text.index("bertlab check: public tests of")
    end = text.index("\n", text.index("(all selected tasks pass" if "(all selected" in text[start:]
                                       else "(not everything passes yet", start))
    return text[start:end]


def table(report: str) -> dict[str, tuple[int, int, str]]:
    return {m.group(1): (int(m.group(2)), int(m.group(3)), m.group(4)) for m in re.finditer(
        r"^(cka|pooling|siamese|retrieval)\s+(\d+)/(\d+)\s+(passed|failed|not started|not run|no tests)\s*$",
        report, re.M)}


# ---------------------------------------------------------------------------------------------
# Real watchers in a bundle
# ---------------------------------------------------------------------------------------------

@pytest.mark.slow  # (over 10 s: the fast loop leaves it to the whole suite)
@pytest.mark.tasks("cka", "pooling", "siamese", "retrieval")
def test_watch_loads_once_reports_as_check_does_and_reruns_only_what_a_save_affects(bundle):
    """The cold start says what it loads; the first report is `bertlab check`'s for the same files
    (a pass, a wrong value, a stub, a crash that stops the run); a save reruns its task and the tasks
    whose files import it; a file no task uses reruns nothing; Ctrl-C ends it with 130 and one line."""
    use_solution(bundle, "cka")
    pooling = bundle / "exercises" / "pooling.py"
    pooling.write_text(replace_in_stub(pooling.read_text(), "pooling", "masked_mean_pool",
                                       "return hidden_states.mean(dim=1)"))  # padding counted: a known mistake
    retrieval = bundle / "exercises" / "retrieval.py"
    retrieval.write_text(replace_in_stub(retrieval.read_text(), "retrieval", "semantic_search",
                                         "import os; os._exit(3)"))
    plain = subprocess.run([sys.executable, "-m", "bertlab.cli", "check"], cwd=bundle, env=student_environ(bundle),
                           capture_output=True, text=True, timeout=900)
    assert plain.returncode == 1, plain.stdout + plain.stderr
    expected = without_timings(report_of(plain.stdout))
    statuses = {task: row[2] for task, row in table(expected).items()}
    assert statuses == {"cka": "passed", "pooling": "failed", "siamese": "not run", "retrieval": "failed"}, expected

    with Watcher(bundle) as watcher:
        loading = watcher.wait_for(r"^Ready in \d+\.\d s")
        assert "getting ready" in loading and "importing torch and transformers..." in loading
        assert "loading the public tests..." in loading and "loading the MiniLM model..." in loading
        first = watcher.next_report()
        assert without_timings(report_of(first)) == expected

        save(bundle / "exercises" / "cka.py", (REFERENCE_DIR / "cka.py").read_text() + "\n# saved again\n")
        again = watcher.next_report()
        assert "exercises/cka.py saved: checking cka ---" in again
        assert set(table(again)) == {"cka"} and table(again)["cka"][2] == "passed", again

        use_solution(bundle, "pooling")
        fixed = watcher.next_report()
        assert "exercises/pooling.py saved: checking pooling, siamese ---" in fixed  # siamese.py imports it
        assert set(table(fixed)) == {"pooling", "siamese"}
        assert table(fixed)["pooling"][2] == "passed" and table(fixed)["siamese"][2] == "not started", fixed

        helper = bundle / "exercises" / "helpers.py"
        save(helper, "SCALE = 1.0\n")
        assert "no task of this check uses it" in watcher.wait_for(r"exercises/helpers\.py changed")
        cka = (REFERENCE_DIR / "cka.py").read_text().replace("from __future__ import annotations",
                                                             "from __future__ import annotations\n\nfrom . import helpers", 1)
        save(bundle / "exercises" / "cka.py", cka)
        assert set(table(watcher.next_report())) == {"cka"}
        save(helper, "SCALE = 2.0\n")  # now cka.py imports it
        helped = watcher.next_report()
        assert "exercises/helpers.py saved: checking cka ---" in helped and set(table(helped)) == {"cka"}

        assert watcher.stop(signal.SIGINT) == 130
        time.sleep(0.3)
        tail = watcher.text().rstrip().splitlines()
        assert tail[-1] == "Stopped watching exercises/.", tail[-3:]
        assert "Traceback" not in watcher.text() + "\n".join(watcher.errors), watcher.errors
        assert not wait_until_gone(watcher.token)


@pytest.mark.slow  # (over 10 s: the fast loop leaves it to the whole suite)
def test_each_check_imports_the_students_files_anew_and_the_watcher_never_does(bundle):
    """An edit between two checks is what the next check runs, also an edit of the same size within
    the same second (a stale .pyc would run the old code); the student's module is imported in a new
    process each check, never in the watcher's. A save burst is one check; a save during a check
    starts it again."""
    imports = bundle / "imports.txt"
    cka = bundle / "exercises" / "cka.py"
    marker = 'raise ValueError("edition AAAA")'
    template = stub_with(bundle, "cka", "linear_cka", marker)
    template = template.replace("from __future__ import annotations", "from __future__ import annotations\n\n"
                                f"import os as _os\nopen({str(imports)!r}, 'a').write(f'{{_os.getpid()}}\\n')", 1)
    cka.write_text(template)
    with Watcher(bundle, "--task", "cka", PYTHONDONTWRITEBYTECODE="") as watcher:  # as a student's Python: .pyc files
        first = watcher.next_report()
        assert "edition AAAA" in first and table(first)["cka"][2] == "failed", first
        for edition in ("BBBB", "CCCC"):  # same size and modification second: a .pyc would pass for it
            before = cka.stat().st_mtime_ns
            save(cka, template.replace("AAAA", edition))
            os.utime(cka, ns=(before + 1, before + 1))
            report = watcher.next_report()
            assert f"edition {edition}" in report and "AAAA" not in report, report
        pids = [int(line) for line in imports.read_text().split()]
        assert watcher.proc.pid not in pids
        assert len(set(pids)) == len(pids) >= 3, pids  # one process per check (each imports it once)

        slow = template.replace(marker, "import time; time.sleep(0 if globals().get('_slept') else 1.5); "
                                        "globals()['_slept'] = True; " + marker)  # the first call only
        for _ in range(3):  # one save, written three times in a row
            cka.write_text(slow.replace("AAAA", "DDDD"))
        burst = watcher.next_report()
        assert burst.count("saved: checking cka") == 1 and "edition DDDD" in burst, burst

        save(cka, slow.replace("AAAA", "EEEE"))
        watcher.wait_for(r"^bertlab check: public tests of cka")
        time.sleep(0.5)  # the check has started and waits in the student's sleep
        save(cka, template.replace("AAAA", "FFFF"))
        restarted = watcher.next_report()
        assert "exercises/cka.py changed during the check: checking cka again." in restarted, restarted
        assert "edition FFFF" in report_of(restarted[restarted.index("changed during the check"):])
        assert watcher.proc.poll() is None


@pytest.mark.slow  # (over 10 s: the fast loop leaves it to the whole suite)
def test_a_crash_an_exit_or_a_hang_fails_that_check_and_the_watcher_goes_on(bundle, released):
    """os._exit, SystemExit, a segmentation fault and an endless loop each fail the check of cka with
    `bertlab check`'s explanation; the watcher answers the next save each time, and a process the
    student's code started and left behind is gone once its check is over."""
    leftover = bundle / "leftover.pid"
    cases = [
        ("import os; os._exit(3)", "The test process died while running this test (exit status 3)"),
        ("raise SystemExit(4)", "SystemExit"),
        ("import ctypes; ctypes.string_at(0)", "killed by signal SIGSEGV"),
        ("while True: pass", "Timed out: this test ran for more than 2 s"),
        # (the pid file is replaced whole: a test killed at its time limit between truncating and writing
        # it would leave it empty, seen on a loaded machine)
        ("import os, subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)']); "
         f"open({str(leftover) + '.tmp'!r}, 'w').write(str(p.pid)); os.replace({str(leftover) + '.tmp'!r}, "
         f"{str(leftover)!r}); return 0.5", "failed"),
    ]
    cka = bundle / "exercises" / "cka.py"
    cka.write_text(stub_with(released, "cka", "linear_cka", cases[0][0]))
    with Watcher(bundle, "--task", "cka", **{TIMEOUT_ENV: "2"}) as watcher:
        for index, (code, said) in enumerate(cases):
            if index:
                save(cka, stub_with(released, "cka", "linear_cka", code))
            report = watcher.next_report()
            assert table(report)["cka"][2] == "failed", report
            assert said in report, report
            assert "Traceback" not in report
            assert watcher.proc.poll() is None
        grandchild = int(_written(leftover))
        assert not Path(f"/proc/{grandchild}").exists() or _is_zombie(grandchild), "a leftover process outlived its check"
        use_solution(bundle, "cka")
        assert table(watcher.next_report())["cka"][2] == "passed"


def _written(path: Path, within_s: float = 10.0) -> str:
    """``path``'s text once the student's code has written it."""
    deadline = time.monotonic() + within_s
    while not (text := path.read_text().strip() if path.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert text, f"{path.name} was never written: the student's code did not get to start its process"
    return text


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:].split()[0] == "Z"


HANGING_CKA = """\
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(3600)"])
open({pidfile!r}, "w").write(str(child.pid))
time.sleep(3600)
"""


@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_no_process_outlives_a_watcher_that_is_killed(bundle, sig):
    """Killed while a check runs whose student code sleeps and has started a process of its own (in a
    session of its own, out of the check's process group), the watcher leaves nothing behind."""
    pidfile = bundle / "grandchild.pid"
    code = "; ".join(HANGING_CKA.format(pidfile=str(pidfile)).splitlines())
    (bundle / "exercises" / "cka.py").write_text(stub_with(bundle, "cka", "linear_cka", code))
    with Watcher(bundle, "--task", "cka") as watcher:
        assert processes_with(watcher.token) == [watcher.proc.pid] or watcher.proc.poll() is None
        watcher.wait_for(r"^bertlab check: public tests of cka")
        deadline = time.monotonic() + 120
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline, watcher.text()
            time.sleep(0.05)
        grandchild = int(pidfile.read_text())
        running = processes_with(watcher.token)
        # the watcher, the check's guard, the check, and the student's own process
        assert watcher.proc.pid in running and grandchild in running and len(running) >= 4, running
        os.kill(watcher.proc.pid, sig)
        code = watcher.proc.wait(30)
        assert code == (128 + sig if sig == signal.SIGTERM else -sig)
        left = wait_until_gone(watcher.token)
        assert not left, f"left behind: {[Path(f'/proc/{p}/cmdline').read_bytes() for p in left if Path(f'/proc/{p}').exists()]}"
        if sig == signal.SIGTERM:
            time.sleep(0.3)
            assert watcher.text().rstrip().splitlines()[-1] == "Stopped watching exercises/ (SIGTERM)."
            assert "Traceback" not in "\n".join(watcher.errors)


def test_no_process_outlives_a_plain_check_that_is_killed(bundle):
    token = uuid.uuid4().hex
    pidfile = bundle / "grandchild.pid"
    code = "; ".join(HANGING_CKA.format(pidfile=str(pidfile)).splitlines())
    (bundle / "exercises" / "cka.py").write_text(stub_with(bundle, "cka", "linear_cka", code))
    assert not processes_with(token)
    proc = subprocess.Popen([sys.executable, "-m", "bertlab.cli", "check", "--task", "cka"], cwd=bundle,
                            env=student_environ(bundle, **{TOKEN_ENV: token}), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        assert len(processes_with(token)) >= 4
        proc.kill()
        proc.wait(30)
        assert not wait_until_gone(token)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------------------------------
# The pieces
# ---------------------------------------------------------------------------------------------

@pytest.mark.tasks("cka", "pooling", "siamese", "retrieval")
def test_a_save_affects_its_task_and_every_task_whose_file_imports_it(tmp_path):
    files = {"cka.py": "from . import helpers\n", "pooling.py": "import torch\n",
             "siamese.py": "from .pooling import masked_mean_pool\n", "retrieval.py": "from .siamese import x\n",
             "helpers.py": "from .maths import y\n", "maths.py": "", "notes.py": "def (:\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert affected_tasks(["cka.py"], tmp_path, TASKS) == ["cka"]
    assert affected_tasks(["pooling.py"], tmp_path, TASKS) == ["pooling", "siamese", "retrieval"]
    assert affected_tasks(["maths.py"], tmp_path, TASKS) == ["cka"]
    assert affected_tasks(["maths.py", "siamese.py"], tmp_path, TASKS) == ["cka", "siamese", "retrieval"]
    assert affected_tasks(["notes.py"], tmp_path, TASKS) == []
    assert affected_tasks(["pooling.py"], tmp_path, ["siamese"]) == ["siamese"]
    assert affected_tasks(["README.md"], tmp_path, TASKS) == []
    (tmp_path / "pooling.py").unlink()  # a deleted file still affects the tasks that import it
    assert affected_tasks(["pooling.py"], tmp_path, TASKS) == ["pooling", "siamese", "retrieval"]
    assert local_imports("import pooling, os\nfrom pooling import a\nfrom . import cka, nothing\n",
                         {"pooling", "cka"}) == {"pooling", "cka"}


def test_the_poll_sees_writes_renames_and_deletions_and_waits_for_a_burst_to_end(tmp_path):
    (tmp_path / "cka.py").write_text("a = 1\n")
    files = ExerciseFiles(tmp_path)
    assert files.changed() == set()
    (tmp_path / "cka.py").write_text("a = 2\n")  # same size, same second: still a change
    assert files.changed() == {"cka.py"}
    save(tmp_path / "pooling.py", "b = 1\n")
    (tmp_path / ".#cka.py").write_text("an editor's lock file\n")
    (tmp_path / "notes.txt").write_text("not code\n")
    assert files.changed() == {"pooling.py"}
    (tmp_path / "cka.py").unlink()
    assert files.changed() == {"cka.py"}

    def burst():
        for i in range(4):
            (tmp_path / "siamese.py").write_text(f"c = {i}\n")
            time.sleep(0.03)
        (tmp_path / "retrieval.py").write_text("d = 1\n")

    writer = threading.Thread(target=burst)
    writer.start()
    started = time.monotonic()
    assert files.wait() == {"siamese.py", "retrieval.py"}
    writer.join()
    assert time.monotonic() - started < 2


def test_a_guarded_check_kills_what_it_leaves_behind_and_stop_kills_everything(tmp_path):
    pidfile = tmp_path / "left.pid"

    def leaves_a_process() -> int:
        child = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(3600)"])
        pidfile.write_text(str(child.pid))
        return 7

    finished = guard.start(leaves_a_process, tmp_path / "out.txt")
    assert finished.wait(60) == 7
    left = int(pidfile.read_text())
    assert _is_zombie(left), "the guard let the payload's process outlive it"

    def hangs() -> int:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        pidfile.write_text(str(child.pid))
        time.sleep(3600)
        return 0

    pidfile.unlink()
    running = guard.start(hangs, tmp_path / "out.txt")
    deadline = time.monotonic() + 60
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert running.poll() is None
    started = time.monotonic()
    running.stop()
    assert running.returncode == -signal.SIGKILL and time.monotonic() - started < 5
    assert _is_zombie(int(pidfile.read_text())) and _is_zombie(running.pid)


GUARDED_CHECKER = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    from bertlab.check import guard

    def payload() -> int:
        child = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(3600)"])
        Path(sys.argv[1]).write_text(str(child.pid))
        time.sleep(3600)
        return 0

    guard.start(payload, Path(sys.argv[2]))
    time.sleep(3600)
""")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_guard_whose_checker_dies_kills_everything_of_its_check(tmp_path, sig):
    """Five times: the checker killed while its check runs and the check's own child (in a session of
    its own) sleeps; nothing of the check survives it."""
    for round_ in range(5):
        token, pidfile = uuid.uuid4().hex, tmp_path / f"child-{round_}.pid"
        checker = subprocess.Popen([sys.executable, "-c", GUARDED_CHECKER, str(pidfile), str(tmp_path / "out.txt")],
                                   env={**os.environ, TOKEN_ENV: token})
        deadline = time.monotonic() + 60
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline and checker.poll() is None
            time.sleep(0.01)
        assert len(processes_with(token)) == 4  # the checker, the guard, the payload, its child
        checker.send_signal(sig)
        checker.wait(30)
        assert not wait_until_gone(token), f"round {round_}: the check's processes outlived its checker"


FORK_SAFETY = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from bertlab.check import guard, warm

    checker = warm.WarmChecker()
    checker.load(lambda line: None, Path(sys.argv[1]))
    import torch
    assert torch.get_num_threads() == 1, "the watcher must keep torch to one thread"
    checker.torch_threads = 2  # a check that asks for two (OMP_NUM_THREADS=2) starts its own pool
    out = Path(sys.argv[2])

    def parallel_work() -> int:
        import numpy as np
        torch.set_num_threads(checker.torch_threads)
        x = torch.randn(1500, 1500)
        total = float((x @ x).sum()) + float(torch.randn(4_000_000).sin().sum())
        total += float((np.ones((800, 800)) @ np.ones((800, 800))).sum())
        print("threads", torch.get_num_threads(), "ok", flush=True)
        return 0

    for _ in range(3):
        child = guard.start(parallel_work, out)
        assert child.wait(120) == 0, out.read_text()
    print("forks ok")
""")


@pytest.mark.slow  # (over 5 s each, or many cases: the fast loop leaves it to the whole suite)
def test_the_warm_checker_forks_children_that_can_use_threads(tmp_path, released):
    """After the warm checker has loaded torch, transformers, the model and the tests, a forked child
    can start torch's and NumPy's thread pools and finish (GNU OpenMP deadlocks in a fork of a
    process whose pool has started)."""
    result = subprocess.run([sys.executable, "-c", FORK_SAFETY, str(released / "exercises"), str(tmp_path / "out.txt")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "forks ok" in result.stdout, result.stdout + result.stderr
    assert (tmp_path / "out.txt").read_text().count("threads 2 ok") == 3


def test_a_watcher_that_cannot_load_says_so_and_checks_with_a_fresh_python(monkeypatch, tmp_path):
    from bertlab.check import warm

    def broken(self, say, code_dir):
        raise ImportError("no module named torch")

    monkeypatch.setattr(warm.WarmChecker, "load", broken)
    said: list[str] = []
    assert warm.prepare(said.append, tmp_path) is None
    assert len(said) == 1 and "ImportError: no module named torch" in said[0] and "fresh Python" in said[0]
    monkeypatch.setattr(warm, "supported", lambda: False)
    said.clear()
    assert warm.prepare(said.append, tmp_path) is None and "fresh Python" in said[0]


def test_watch_refuses_the_reference_solutions(tmp_path):
    from bertlab.check.watch import watch_check
    from bertlab.errors import UsageError

    with pytest.raises(UsageError, match="--dir"):
        watch_check(impl="reference", root=tmp_path)
