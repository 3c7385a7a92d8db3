"""Hostile submissions (tests/redteam_submissions/) against the sandbox.

Each test runs one hostile submission and checks that the harm stays inside: no false pass, nothing
read or written that the grader keeps to itself, the trusted process untouched. Then an honest
submission runs in the SAME Sandbox and must still get correct results, so nothing leaks from one
student to the next.
"""

from __future__ import annotations

import math
import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bertlab.tasks import EXERCISE_FILES
from bertlab_grader.sandbox.remote import Remote, StudentError, SubmissionCrashed, SubmissionTimeout
from bertlab_grader.sandbox import bubblewrap, launcher
from bertlab_grader.sandbox.launcher import Sandbox

KIT = Path(__file__).resolve().parents[1]
SAMPLES = Path(__file__).resolve().parent / "redteam_submissions"
G = torch.Generator().manual_seed(7)
X, Y = torch.randn(12, 5, generator=G), torch.randn(12, 3, generator=G)


def sources(name: str) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((SAMPLES / name).glob("*.py"))}


def reference_cka(X, Y) -> float:
    X, Y = X.double() - X.double().mean(0), Y.double() - Y.double().mean(0)
    return float((Y.T @ X).norm() ** 2 / ((X.T @ X).norm() * (Y.T @ Y).norm()))


#: The red team's sandbox uid (when the tests run as root): neither nobody nor a grading worker's (61000 + k).
REDTEAM_UID = 64000


@pytest.fixture(scope="module")
def sb():
    # Skipped only where bubblewrap is not installed at all. Where it is installed but cannot create
    # its namespaces, Sandbox() raises SandboxUnavailable and every test here fails: that is a broken
    # sandbox, and a skip would hide it.
    if bubblewrap.find_bwrap() is None:
        pytest.skip("bubblewrap (bwrap) is not installed: the red-team suite needs the real sandbox")
    # No MiniLM here (no test needs it), and a smaller memory budget so the hoarder fails fast. A uid of
    # its own: RLIMIT_NPROC counts processes per uid, and the sandboxes of the tests that run beside this
    # module (the whole suite runs on every core) are nobody's: their threads must not use up the forks
    # the grandchild test makes, nor the fork bomb theirs.
    sandbox = Sandbox(kit_root=KIT, hide=[], timeout_s=3.0, memory_mb=1024, preload=(), control_timeout_s=3.0,
                      uid=REDTEAM_UID)
    assert sandbox.isolated
    sandbox.wait_ready()
    yield sandbox
    sandbox.close()


@pytest.fixture(autouse=True)
def honest_student_afterwards(request):
    """After every hostile session: an honest submission, same Sandbox, correct results."""
    yield
    if "sb" not in request.fixturenames:
        return
    sandbox = request.getfixturevalue("sb")
    with sandbox.session(sources("correct")) as impl:
        assert impl.cka.linear_cka(X, Y) == pytest.approx(reference_cka(X, Y), abs=1e-12)
        assert impl.import_errors() == {}
    assert sandbox_processes(sandbox) == ["python"]  # the template alone: the student left nothing


def test_the_honest_submission_hands_in_every_task():
    """correct/ is a whole submission: a file for every registered task (`bertlab new-task` writes the
    new task's, `bertlab remove-task` takes the removed task's away), so that every module the grader
    imports is there and a leak from a hostile session cannot hide behind a missing file."""
    assert sorted(sources("correct")) == sorted(EXERCISE_FILES), (
        f"tests/redteam_submissions/correct/ holds {sorted(sources('correct'))}, the registry's tasks need "
        f"{sorted(EXERCISE_FILES)}: give it the missing task's file (an honest implementation; new-task writes "
        "the reference there) or remove the file of a task the registry no longer has (docs/authoring.md).")


def sandbox_processes(sandbox) -> list[str]:
    """Live processes inside the sandbox (below bwrap's two processes), by command name. A process
    already inside exit() (the kernel's PF_EXITING flag) is not live: it runs nothing of its own
    again, and the template does not wait the milliseconds its memory takes to free."""
    parents, names = {}, {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if rest[0] != "Z" and not int(rest[6]) & 0x4:
            parents.setdefault(int(rest[1]), []).append(int(entry))
            names[int(entry)] = name
    found, stack = [], [sandbox._proc.pid]
    while stack:
        pid = stack.pop()
        if names.get(pid) != "bwrap" and pid != sandbox._proc.pid:
            found.append(names.get(pid, "?"))
        stack.extend(parents.get(pid, ()))
    return sorted(found)


def test_monkeypatching_torch_numpy_pytest_stays_in_the_worker(sb):
    with sb.session(sources("monkeypatch")) as impl:
        value = impl.cka.linear_cka(X, Y)
        # pooling.py sabotaged the worker itself (isinstance, json): it fails, it does not pass
        with pytest.raises(StudentError):
            impl.pooling.masked_mean_pool(torch.ones(1, 2, 3), torch.ones(1, 2))
        assert impl.cka.linear_cka(X, Y) == value  # cka still answers after pooling's crash
    # The trusted process's comparisons are its own, and judge the wrong answer wrong.
    assert value == 0.5 and not math.isclose(value, reference_cka(X, Y))
    assert not torch.allclose(torch.tensor(value), torch.tensor(reference_cka(X, Y)))
    with pytest.raises(AssertionError):
        torch.testing.assert_close(value, reference_cka(X, Y))
    assert value != pytest.approx(reference_cka(X, Y))
    assert not np.allclose(value, reference_cka(X, Y)) and isinstance(value, float)
    assert not torch.equal(torch.zeros(1), torch.ones(1))


@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
def test_replacing_the_kits_probe_changes_nothing_the_grader_calls():
    # fake_probe encodes under no_grad and swaps bertlab.probes' gradient probe for a liar at import.
    # A sandbox of its own: the worker builds a BERT here, which the short limits of `sb` do not allow.
    from bertlab.models import named_model
    from bertlab.probes import run_probe
    from bertlab.teaching.siamese import disjoint_pair_batch

    if bubblewrap.find_bwrap() is None:
        pytest.skip("bubblewrap (bwrap) is not installed: the red-team suite needs the real sandbox")
    model = named_model("tiny-bert-seed41")
    (ids_a, mask_a), (ids_b, mask_b) = disjoint_pair_batch(seed=41)
    sandbox = Sandbox(kit_root=KIT, hide=[], preload=("tiny-bert-seed0",))
    try:
        sandbox.wait_ready()
        with sandbox.session(sources("fake_probe")) as impl:
            sbert = impl.siamese.create_sbert(model)
            report = run_probe(impl, "siamese_gradients", sbert, model, ids_a, mask_a, ids_b, mask_b)
    finally:
        sandbox.close()
    assert report["output"] == "tensor" and report["has_graph"] is False
    assert report["branch_a"] == 0.0 and report["branch_b"] == 0.0


def test_always_equal_objects_stay_handles(sb):
    with sb.session(sources("always_equal")) as impl:
        liar = impl.cka.linear_cka(X, Y)
        matrix = impl.cka.cka_matrix([X, Y])
        pooled = impl.pooling.masked_mean_pool(torch.ones(2, 3, 4), torch.ones(2, 3))
    assert isinstance(liar, Remote) and liar != 1.0 and liar != reference_cka(X, Y)
    with pytest.raises(TypeError, match="Liar"):
        float(liar)
    with pytest.raises(TypeError, match="Liar"):
        assert liar
    with pytest.raises((TypeError, AssertionError)):
        torch.testing.assert_close(liar, reference_cka(X, Y))
    assert liar != pytest.approx(reference_cka(X, Y))
    # The tensor subclass crossed as plain data: its lying __eq__ stayed behind.
    assert type(matrix) is torch.Tensor
    with pytest.raises(AssertionError):
        torch.testing.assert_close(matrix, torch.ones(2, 2))
    assert all(isinstance(p, Remote) for p in pooled)
    with pytest.raises((TypeError, AssertionError, ValueError)):
        torch.testing.assert_close(pooled, torch.ones(2, 4))


def test_cannot_read_solutions_hidden_tests_or_the_graders_memory(sb):
    grader, inside = KIT / "grader" / "bertlab_grader", Path("/tmp/.bertlab-kit/bertlab_sandbox")
    targets = [str(KIT / "solutions" / "*.py"), str(KIT / "tests" / "hidden" / "**" / "*.py"),
               str(KIT / "tests" / "**" / "*.py"), str(grader / "**" / "*.py"), str(inside / "*.py"),
               str(KIT / ".git" / "config"), "/root/**", "/home/*", "/etc/shadow"]
    with sb.session(sources("snoop")) as impl:
        found = impl.cka.read_all(targets)
        secrets = impl.cka.parent_secrets()
        output = impl.output()
    readable = {p: v for p, v in found.items() if not v.startswith(("ERR:", "DIR:"))}
    # Only the sandboxed server's own folder is readable (mounted alone, read-only): no solution, no test.
    shown = {str(inside / p.name) for p in (grader / "sandbox" / "inside").glob("*.py")}
    assert set(readable) <= shown, set(readable) - shown
    assert "### BEGIN SOLUTION" not in output and "def test_" not in output
    assert secrets["mem"].startswith("ERR") and secrets["environ"].startswith("ERR")
    assert secrets["fd"].startswith("ERR") and secrets["uid"] == REDTEAM_UID  # (the unprivileged uid it was given)
    from bertlab_grader.sandbox.malloc_pin import STEADY_MALLOC_ENV  # malloc's pinned thresholds: no secret

    assert set(secrets["env"]) <= {"PATH", "HOME", "LANG", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "HF_HUB_OFFLINE",
                                   "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY", "TOKENIZERS_PARALLELISM",
                                   "XDG_CACHE_HOME", "MPLCONFIGDIR", "TMPDIR", "PWD", *STEADY_MALLOC_ENV,
                                   "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}  # one thread: no secret


def test_cannot_write_outside_its_scratch_space(sb, tmp_path_factory):
    gradebook = Path(os.environ.get("HOME", "/root")) / f".bertlab-redteam-gradebook-{os.getpid()}.db"
    gradebook.write_text("alice,50\n")
    try:
        targets = [str(gradebook), str(KIT / "grader" / "bertlab_grader" / "sandbox" / "inside" / "rpc.py"),
                   "/tmp/.bertlab-kit/bertlab_sandbox/rpc.py",
                   str(KIT / "src" / "bertlab" / "__init__.py"),
                   "/var/tmp/redteam", "/etc/redteam", "/usr/lib/redteam", "/dev/shm/redteam"]
        with sb.session(sources("writer")) as impl:
            result = impl.cka.write_everywhere(targets)
            scratch = impl.cka.write_scratch("note.txt", "for the next student")
        assert all(r.startswith("ERR:") for r in result.values()), result
        assert gradebook.read_text() == "alice,50\n"
        assert not Path("/var/tmp/redteam").exists() and not Path("/etc/redteam").exists()
        with sb.session(sources("writer")) as impl:  # the next student finds nothing left behind
            assert impl.cka.read_scratch([scratch]) == {scratch: "ERR:FileNotFoundError"}
    finally:
        gradebook.unlink()


def test_no_network_at_all(sb):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    with listener:
        with sb.session(sources("network")) as impl:
            result = impl.cka.connect_all([("127.0.0.1", listener.getsockname()[1]), ("8.8.8.8", 53),
                                           ("1.1.1.1", 443), ("::1", listener.getsockname()[1])])
        with pytest.raises(socket.timeout):
            listener.accept()
    assert not any(r in ("CONNECTED", "RESOLVED") for r in result.values()), result


@pytest.mark.slow  # (over 5 s each, or many cases: the fast loop leaves it to the whole suite)
def test_fork_bomb_is_contained(sb):
    started = time.monotonic()
    with sb.session(sources("forkbomb"), call_timeout_s=2.0) as impl:
        with pytest.raises(SubmissionTimeout):
            impl.cka.linear_cka(X, Y)
    assert time.monotonic() - started < 30
    assert sandbox_processes(sb) == ["python"]


def test_unbounded_allocation_fails_inside_the_sandbox(sb):
    with sb.session(sources("memory"), call_timeout_s=20.0) as impl:
        with pytest.raises(StudentError, match="MemoryError"):
            impl.cka.linear_cka(X, Y)
        with pytest.raises(RuntimeError, match="allocate"):
            impl.cka.cka_matrix([X])


@pytest.mark.tasks("retrieval")  # the red team's loop is in its retrieval.py
def test_infinite_loop_times_out_and_the_next_call_works(sb):
    with sb.session(sources("loop"), call_timeout_s=1.5) as impl:
        # retrieval.py never finishes importing: it is blamed, and only it fails from then on
        assert impl.cka.linear_cka(X, Y) == pytest.approx(reference_cka(X, Y))
        with pytest.raises(SubmissionTimeout, match="retrieval.py did not finish importing"):
            impl.retrieval.semantic_search(X, Y)
        with pytest.raises(SubmissionTimeout):
            impl.cka.cka_matrix([X, Y])
        assert impl.cka.linear_cka(X, Y) == pytest.approx(reference_cka(X, Y))


def test_exit_at_import_fails_only_that_module(sb):
    with sb.session(sources("exit_at_import")) as impl:
        errors = impl.import_errors()
        assert set(errors) == {"cka", "siamese"}
        with pytest.raises(SubmissionCrashed, match="cka.py crashed while importing"):
            impl.cka.linear_cka(X, Y)
        with pytest.raises(SubmissionCrashed, match="SystemExit"):
            impl.siamese.create_sbert(None)
        pooled = impl.pooling.masked_mean_pool(torch.ones(1, 2, 3), torch.ones(1, 2))
    torch.testing.assert_close(pooled, torch.ones(1, 3))


def test_exit_inside_a_call_is_a_crash_not_a_pass(sb):
    with sb.session(sources("exit_in_call")) as impl:
        with pytest.raises(SubmissionCrashed, match="exit code 0"):
            impl.cka.linear_cka(X, Y)  # os._exit(0)
        with pytest.raises(SubmissionCrashed, match="SystemExit"):
            impl.cka.cka_matrix([X])  # sys.exit(0): in a fresh process, since the last one died
        with pytest.raises(SubmissionCrashed, match="SIGSEGV"):
            impl.cka.segfault()


def test_ignoring_signals_does_not_save_a_loop(sb):
    with sb.session(sources("signals"), call_timeout_s=1.0) as impl:
        with pytest.raises(SubmissionTimeout):
            impl.cka.linear_cka(X, Y)


def test_flooding_stdout_is_truncated(sb):
    started = time.monotonic()
    with sb.session(sources("flood"), call_timeout_s=20.0) as impl:
        assert impl.cka.linear_cka(X, Y) == 0.25
        output = impl.output()
    assert len(output) < 21_000 and "omitted" in output and output.endswith("LAST LINE OF THE FLOOD\n")
    assert time.monotonic() - started < 15


def test_garbage_on_its_descriptors_is_a_crash_then_recovery(sb):
    with sb.session(sources("fd_garbage")) as impl:
        with pytest.raises(SubmissionCrashed, match="protocol"):
            impl.cka.linear_cka(X, Y)
    with sb.session(sources("correct")) as impl:
        assert impl.cka.linear_cka(X, Y) == pytest.approx(reference_cka(X, Y))


def test_a_lingering_grandchild_does_not_reach_the_next_student(sb):
    with sb.session(sources("grandchild")) as impl:
        assert impl.cka.linear_cka(X, Y) == 1.0
        assert len(impl.cka.others()) == 1  # the grandchild, alive while its session lasts
    with sb.session(sources("grandchild")) as impl:
        assert impl.cka.others() == []


def test_killing_the_template_restarts_it(sb):
    generation = sb.generation
    with sb.session(sources("kill_template")) as impl:
        try:
            impl.cka.linear_cka(X, Y)
        except SubmissionCrashed:
            pass  # whether the reply beat the template's death is a race; both are fine
    with sb.session(sources("correct")) as impl:
        assert impl.cka.linear_cka(X, Y) == pytest.approx(reference_cka(X, Y))
    assert sb.generation > generation


@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
def test_freezing_the_template_gets_it_replaced(sb):
    generation = sb.generation
    with sb.session(sources("stop_template")) as impl:
        assert impl.cka.linear_cka(X, Y) == 1.0
    assert sb.generation > generation  # it stopped answering, so it was replaced


def test_system_v_shared_memory_does_not_carry_over_to_the_next_student(sb):
    src = {"cka.py": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                     "def get(create):\n"
                     "    return libc.shmget(0xB3A7, 4096, (0o1000 | 0o600) if create else 0)\n"}
    with sb.session(src) as impl:
        assert impl.cka.get(True) >= 0  # a segment the next student could read
    with sb.session(src) as impl:
        assert impl.cka.get(False) == -1
