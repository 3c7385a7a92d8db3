"""The sandbox (bertlab_grader/sandbox): correct results across the boundary, the fork-safety guard, isolation,
and failing closed.

One warm Sandbox serves the whole module (starting one costs seconds: torch, transformers, MiniLM).
Where bubblewrap is not installed at all, the isolation tests are skipped and the rest run on the
unisolated fallback; where it is installed but does not work, the module fails (a broken sandbox is
not a missing one).
"""

from __future__ import annotations

import contextlib
import json
import io
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from bertlab.tasks import EXERCISES
import torch

from bertlab_grader.core.failures import GraderFailure
from bertlab_grader.sandbox.remote import StudentError, SubmissionCrashed, SubmissionTimeout
from bertlab_grader.sandbox import bubblewrap, launcher, template_process
from bertlab_grader.sandbox.bubblewrap import SandboxUnavailable, bubblewrap_status
from bertlab_grader.sandbox.launcher import FALLBACK_WARNING, Sandbox, SandboxError
from conftest import THREAD_VARIABLES

KIT = Path(__file__).resolve().parents[1]
SAMPLES = Path(__file__).resolve().parent / "redteam_submissions"
SECRET = "SECRET-GRADEBOOK-7f3a"
BWRAP_INSTALLED = bubblewrap.find_bwrap() is not None


def sources(name: str, **extra: str) -> dict[str, str]:
    found = {p.name: p.read_text() for p in sorted((SAMPLES / name).glob("*.py"))}
    found.update({f"{k}.py": v for k, v in extra.items()})
    return found


def reference_cka(X, Y) -> float:
    X, Y = X.double() - X.double().mean(0), Y.double() - Y.double().mean(0)
    return float((Y.T @ X).norm() ** 2 / ((X.T @ X).norm() * (Y.T @ Y).norm()))


@pytest.fixture(scope="module")
def course():
    """A fake course directory outside /tmp (which the sandbox hides anyway), with secrets in it."""
    base = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path.home()
    root = Path(tempfile.mkdtemp(prefix="bertlab-course-", dir=base))
    (root / "submitted" / "bob").mkdir(parents=True)
    (root / "submitted" / "bob" / "cka.py").write_text(f"# {SECRET} bob's answer\n")
    (root / "gradebook.db").write_text(SECRET)
    loose = root.parent / f"{root.name}-gradebook.db"  # a file hidden on its own
    loose.write_text(SECRET)
    yield SimpleNamespace(root=root, loose=loose)
    shutil.rmtree(root, ignore_errors=True)
    loose.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def sandboxes(course):
    """The isolated sandbox every test uses and a fallback one (rlimits only), warming up together."""
    launcher._warned = False
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        fallback = Sandbox(kit_root=KIT, use_bwrap=False, preload=())
    # Without bubblewrap installed, the tests of results still run (on the fallback); with it
    # installed but broken this raises SandboxUnavailable and every test here fails.
    main = Sandbox(kit_root=KIT, hide=[course.root, course.loose], timeout_s=20.0,
                   unsafe_no_sandbox=not BWRAP_INSTALLED)
    from bertlab.models import named_model

    named_model("tiny-bert-seed0")  # the trusted side's own imports, while the templates warm up
    yield SimpleNamespace(main=main, fallback=fallback, fallback_stderr=stderr.getvalue())
    main.close()
    fallback.close()


@pytest.fixture(scope="module")
def sb(sandboxes):
    info = sandboxes.main.wait_ready()
    print(f"\ntemplate start-up: {sandboxes.main.startup_s:.2f} s (worker set-up {info['setup_s']} s)")
    return sandboxes.main


# ----------------------------------------------------------------------------------- correctness

def test_correct_submission_gives_correct_values(sb):
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(20, 5, generator=g), torch.randn(20, 3, generator=g)
    h = torch.randn(2, 4, 6, generator=g)
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]])
    started = time.monotonic()
    with sb.session(sources("correct")) as impl:
        assert impl.import_errors() == {}
        print(f"session start (fork + 4 imports): {time.monotonic() - started:.3f} s")
        value = impl.cka.linear_cka(X, Y)
        assert type(value) is float and value == pytest.approx(reference_cka(X, Y), abs=1e-12)
        assert impl.cka.linear_cka(X.numpy(), Y.numpy()) == pytest.approx(value, abs=1e-12)
        pooled = impl.pooling.masked_mean_pool(h, mask)
        torch.testing.assert_close(pooled, torch.stack([h[0, :2].mean(0), torch.zeros(6)]))
        with pytest.raises(ValueError, match="2-D"):
            impl.cka.linear_cka(X[0], Y)
        small = torch.randn(4, 8)
        started = time.monotonic()
        for _ in range(50):
            impl.pooling.masked_mean_pool(small[None], torch.ones(1, 4))
        print(f"round trip, small tensor: {(time.monotonic() - started) / 50 * 1000:.2f} ms per call")


def test_forked_child_completes_parallel_ops_and_a_minilm_forward(sb):
    """Guards the fork/OpenMP hang: the template ran MiniLM multi-threaded before forking."""
    assert sb.info["threads"] >= 1
    probe = ("import time, torch\n"
             "def run(model, ids, mask):\n"
             "    a = torch.randn(512, 512)\n"
             "    (a @ a).sum()\n"
             "    start = time.perf_counter()\n"
             "    with torch.no_grad():\n"
             "        out = model(input_ids=ids, attention_mask=mask).last_hidden_state\n"
             "    return torch.get_num_threads(), time.perf_counter() - start, out.shape[0], bool(out.isfinite().all())\n")
    ids = torch.randint(1000, 2000, (32, 16), generator=torch.Generator().manual_seed(0))
    minilm = SimpleNamespace(_bertlab_model_name="minilm")  # rebuilt by name in the server
    with sb.session({"cka.py": probe}, call_timeout_s=30.0) as impl:
        threads, seconds, batch, finite = impl.cka.run(minilm, ids, torch.ones_like(ids))
    print(f"MiniLM forward, 32 sentences x 16 tokens, forked child: {seconds:.3f} s")
    assert threads == 1 and batch == 32 and finite


def test_a_students_changes_to_the_shared_model_do_not_reach_the_next_student(sb):
    src = ("def vandalize(model):\n    model.embeddings.word_embeddings.weight.data.zero_()\n"
           "def checksum(model):\n    return float(model.embeddings.word_embeddings.weight.abs().sum())\n")
    minilm = SimpleNamespace(_bertlab_model_name="minilm")
    with sb.session({"cka.py": src}) as impl:
        before = impl.cka.checksum(minilm)
        impl.cka.vandalize(minilm)
        assert impl.cka.checksum(minilm) == 0.0
    with sb.session({"cka.py": src}) as impl:
        assert impl.cka.checksum(minilm) == before > 0


def test_each_trusted_model_object_has_one_worker_copy(sb):
    from bertlab.models import named_model

    src = ("def same(a, b):\n    return a is b\n"
           "def zero(model):\n    model.embeddings.word_embeddings.weight.data.zero_()\n"
           "def total(model):\n    return float(model.embeddings.word_embeddings.weight.abs().sum())\n")
    first, second = named_model("tiny-bert-seed5"), named_model("tiny-bert-seed5")
    with sb.session({"cka.py": src}) as impl:
        assert impl.cka.same(first, first) is True and impl.cka.same(first, second) is False
        impl.cka.zero(first)  # as in process: changes to one model object stay with that object
        assert impl.cka.total(first) == 0.0 and impl.cka.total(second) > 0


def test_handles_methods_call_and_named_models(sb):
    from bertlab.models import named_model

    model = named_model("tiny-bert-seed0")
    ids = torch.randint(1000, 2000, (3, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).float()
    expected = (hidden * m).sum(1) / m.sum(1)
    with sb.session(sources("correct")) as impl:
        sbert = impl.siamese.create_sbert(model)
        assert "SiameseBert" in repr(sbert)
        torch.testing.assert_close(sbert.encode(ids, mask), expected, atol=1e-5, rtol=1e-5)
        scores = sbert(ids, mask, ids.flip(0), mask.flip(0))  # __call__ -> forward
        torch.testing.assert_close(scores, torch.cosine_similarity(expected, expected.flip(0), dim=-1),
                                   atol=1e-5, rtol=1e-5)
        assert impl.siamese.SiameseBert(model).encode(ids, mask).shape == (3, 64)
        with pytest.raises(TypeError, match="SiameseBert"):
            float(sbert)
        with pytest.raises(AttributeError):
            sbert.no_such_method()


@pytest.mark.tasks("pooling", "retrieval")
def test_callbacks_stay_in_the_trusted_process(sb):
    calls = []

    def encode(texts):
        calls.append(list(texts))
        return torch.stack([torch.tensor([len(t), t.count("a") + 1.0]) for t in texts])

    corpus = ["banana", "kiwi", "apple pie", "aaa"]
    with sb.session(sources("correct")) as impl:
        index = impl.retrieval.SemanticIndex(encode)
        index.add(corpus)
        assert len(index) == 4
        hits = index.search("papaya", top_k=2)
        assert calls == [corpus, ["papaya"]]  # counted here, where the student cannot touch the count
        assert len(hits) == 1 and len(hits[0]) == 2
        best = hits[0][0]
        assert best == (best.corpus_id, best.score, corpus[best.corpus_id]) and type(best.corpus_id) is int
        # A callable that calls back into the submission (nested requests both ways).
        index2 = impl.retrieval.SemanticIndex(lambda texts: impl.pooling.masked_mean_pool(
            encode(texts)[:, None, :], torch.ones(len(texts), 1)))
        index2.add(["x", "yy"])
        assert len(index2) == 2


def test_student_exceptions_missing_and_broken_modules(sb):
    broken = {"cka.py": "def linear_cka(X, Y):\n    return {}['missing']\n",
              "siamese.py": "def create_sbert(m):\n    return (\n",  # SyntaxError: only siamese fails
              "pooling.py": "class ShapeError(ValueError):\n    pass\n"
                            "def masked_mean_pool(h, m):\n    raise ShapeError('wrong shape ' + 'x' * 10000)\n"}
    with sb.session(broken) as impl:
        assert set(impl.import_errors()) == {"siamese"}
        with pytest.raises(KeyError) as info:
            impl.cka.linear_cka(1, 2)
        assert 'cka.py", line 2, in linear_cka' in str(info.value)
        kit_frames = [f'"{p.name}"' for p in (KIT / "grader" / "bertlab_grader" / "sandbox" / "inside").glob("*.py")]
        assert not any(frame in str(info.value) for frame in kit_frames), str(info.value)  # only the student's
        with pytest.raises(ValueError) as info:
            impl.pooling.masked_mean_pool(1, 2)
        assert info.value.type_name == "ShapeError" and len(info.value.message) < 3000
        with pytest.raises(StudentError, match="SyntaxError"):
            impl.siamese.create_sbert(None)
        for missing in [e for e in EXERCISES if e.filename not in broken][:1]:  # retrieval, in this kit
            with pytest.raises(StudentError, match=f"{missing.filename} is not part of the submission"):
                getattr(getattr(impl, missing.module), missing.functions[0])(1, 2)


def test_output_is_captured_and_truncated(sb):
    chatty = {"cka.py": "import sys\nprint('at import')\n"
                        "def linear_cka(X, Y):\n    print('x' * 100000)\n    print('done', file=sys.stderr)\n    return 0.5\n"}
    with sb.session(chatty) as impl:
        assert impl.cka.linear_cka(1, 2) == 0.5
        out = impl.output()
    assert out.startswith("at import\n") and out.rstrip().endswith("done")
    assert len(out) < 21_000 and "bytes of output omitted" in out


def test_stashed_arguments_are_sent_once_and_copied_for_each_call(sb):
    """Session.stash (the performance task's path): every call gets a fresh copy made in the server,
    so an in-place change or a remembered object never carries over, and the caller's tensor stays
    as it was. A stash from before a restart is refused, not silently replaced."""
    src = {"cka.py": "SEEN = []\n"
                     "def scale_in_place(x):\n    x.mul_(2)\n    return x.sum().item()\n"
                     "def same_object_as_last_time(x):\n    SEEN.append(x)\n    return len(SEEN) > 1 and SEEN[-2] is x\n"
                     "def hang():\n    while True:\n        pass\n"}
    x = torch.ones(3, 4)
    with sb.session(src, call_timeout_s=2.0) as impl:
        session = impl._session
        stashed = session.stash(x)
        for _ in range(3):  # the doubling never accumulates: each call starts from the stashed ones
            assert session.request(impl.cka.scale_in_place, "call", (stashed,), watch=False) == 24.0
        assert torch.equal(x, torch.ones(3, 4))
        assert session.request(impl.cka.same_object_as_last_time, "call", (stashed,), watch=False) is False
        assert session.request(impl.cka.same_object_as_last_time, "call", (stashed,), watch=False) is False
        # A stash that replaces another drops it there (the performance task's next call's inputs).
        replacement = session.stash(torch.ones(2, 2), replaces=(stashed,))
        assert replacement.sid != stashed.sid
        assert session.request(impl.cka.scale_in_place, "call", (replacement,), watch=False) == 8.0
        with pytest.raises(StudentError, match="does not exist"):
            session.request(impl.cka.scale_in_place, "call", (stashed,), watch=False)
        stashed = session.stash(x)
        with pytest.raises(SubmissionTimeout):
            impl.cka.hang()
        with pytest.raises(TypeError, match="stashed in an earlier run"):
            session.request(impl.cka.scale_in_place, "call", (stashed,), watch=False)


def test_in_place_changes_to_list_elements_are_copied_back(sb):
    """Arguments cross as copies, so an in-place change made in the server is written back into the
    caller's objects: a tensor or array argument, and one that is a direct element of a list or tuple
    argument (cka_matrix's reps), as in process. A float32 element converted to float64 is a copy
    there too, so it stays as it was; other elements (a string, a nested list) cross untouched."""
    import numpy as np

    src = {"cka.py": "import torch\n"
                     "def center_all(reps, more=()):\n"
                     "    for r in list(reps) + list(more):\n"
                     "        if isinstance(r, (list, str)):\n"
                     "            continue\n"
                     "        r = torch.as_tensor(r, dtype=torch.float64)\n"
                     "        r -= r.mean(0)\n"
                     "    return len(reps)\n"
                     "def scale(x):\n    x *= 2\n"}
    tensor64 = torch.arange(6, dtype=torch.float64).reshape(3, 2)
    array64 = np.arange(6, dtype=np.float64).reshape(3, 2) * 3
    tensor32 = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    in_tuple = torch.ones(2, 2, dtype=torch.float64) * torch.tensor([[1.0], [5.0]], dtype=torch.float64)
    reps = [tensor64, array64, tensor32, "not an array", [torch.ones(2, 2, dtype=torch.float64)]]
    expected = [tensor64 - tensor64.mean(0), array64 - array64.mean(0), tensor32.clone()]
    with sb.session(src) as impl:
        assert impl.cka.center_all(reps, more=(in_tuple,)) == 5
        top = torch.ones(2, dtype=torch.float64)
        impl.cka.scale(top)
    assert reps[0] is tensor64 and reps[1] is array64  # written into the caller's objects
    assert torch.equal(tensor64, expected[0])
    assert isinstance(array64, np.ndarray) and np.array_equal(array64, expected[1])
    assert torch.equal(tensor32, expected[2])
    assert torch.equal(in_tuple, torch.tensor([[-2.0, -2.0], [2.0, 2.0]], dtype=torch.float64))
    assert reps[3] == "not an array" and torch.equal(reps[4][0], torch.ones(2, 2, dtype=torch.float64))
    assert torch.equal(top, torch.full((2,), 2.0, dtype=torch.float64))  # a top-level argument, as before


def test_large_arguments_cross_as_memory_files_and_behave_as_any_tensor_there(sb):
    """Issue 44: an argument of a megabyte or more reaches the submission as a sealed memory file, mapped
    copy-on-write (sandbox/inside/rpc.py): the same values; the student's code may change it in place
    (the change is copied back, as for any argument), stash it, resize a copy of it; and a stashed one
    gives every call a fresh copy."""
    from bertlab_grader.sandbox.inside import rpc

    src = {"cka.py": "import torch\nKEPT = []\n"
                     "def describe(x):\n    return [list(x.shape), str(x.dtype), float(x.double().sum())]\n"
                     "def normalise_in_place(x):\n    x /= x.norm(dim=1, keepdim=True)\n    return True\n"
                     "def keep_and_grow(x):\n    KEPT.append(x)\n    y = x.clone()\n    y.resize_(x.shape[0] + 1, x.shape[1])\n"
                     "    return list(y.shape)\n"
                     "def scale_in_place(x):\n    x.mul_(2)\n    return float(x.double().sum())\n"}
    corpus = torch.randn(200_000, 8, generator=torch.Generator().manual_seed(3))
    assert corpus.numel() * corpus.element_size() >= rpc.SHARED_MIN_BYTES
    with sb.session(src) as impl:
        assert impl.cka.describe(corpus) == [[200_000, 8], "torch.float32", pytest.approx(float(corpus.double().sum()))]
        changed = corpus.clone()
        assert impl.cka.normalise_in_place(changed) is True
        torch.testing.assert_close(changed, corpus / corpus.norm(dim=1, keepdim=True))
        assert impl.cka.keep_and_grow(corpus) == [200_001, 8]
        session = impl._session
        stashed = session.stash(corpus)
        total = float(corpus.double().sum())
        for _ in range(2):  # each call starts from what was stashed
            assert session.request(impl.cka.scale_in_place, "call", (stashed,), watch=False) == pytest.approx(2 * total)
    assert torch.equal(corpus, torch.randn(200_000, 8, generator=torch.Generator().manual_seed(3)))


def test_timeout_then_the_next_call_runs_in_a_fresh_child(sb):
    src = {"cka.py": "import time\nSTATE = []\n"
                     "def slow():\n    time.sleep(60)\n"
                     "def remember(x):\n    STATE.append(x)\n    return len(STATE)\n"}
    with sb.session(src, call_timeout_s=1.0) as impl:
        assert impl.cka.remember(1) == 1
        started = time.monotonic()
        with pytest.raises(SubmissionTimeout):
            impl.cka.slow()
        assert time.monotonic() - started < 10
        assert impl.cka.remember(2) == 1  # modules re-imported in a new process


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_a_call_waiting_for_a_cpu_on_a_busy_machine_is_not_timed_out(sb):
    """The call limit counts the submission's time, not the load's: a call that needs 1 s of CPU, under
    a 1.5 s limit, is squeezed onto one CPU with three busy processes (it gets about a quarter of it,
    so it takes about 4 s of wall time) and still returns; the same files graded on a quiet machine
    and on a busy one get the same verdict. A wait that never ends is still cut (the test above)."""
    import subprocess

    src = {"cka.py": "import time\n"
                     "def work(seconds):\n"
                     "    end = time.process_time() + seconds\n"
                     "    while time.process_time() < end:\n        pass\n"
                     "    return seconds\n"}
    core = {min(os.sched_getaffinity(0))}
    with sb.session(src, call_timeout_s=1.5) as impl:
        assert impl.cka.work(0.0) == 0.0  # the process exists now
        pid = impl._session.process_id()
        assert pid, "the submission's process id was not found"
        os.sched_setaffinity(pid, core)
        burners = [subprocess.Popen([sys.executable, "-c", "while True:\n    pass"]) for _ in range(3)]
        try:
            for burner in burners:
                os.sched_setaffinity(burner.pid, core)
            started = time.monotonic()
            assert impl.cka.work(1.0) == 1.0
            wall = time.monotonic() - started
        finally:
            for burner in burners:
                burner.kill()
                burner.wait()
    assert wall > 1.5, f"the call took {wall:.2f} s: the load did not slow it past the limit, so this shows nothing"


def test_a_call_that_timed_out_is_not_made_again_with_inputs_of_the_same_kind(sb):
    """One endless loop costs the limit once: the same function with the same kind of inputs (dtype
    and rank; sizes do not matter) fails at once with the first timeout's message, while another
    kind of input, another function, and a fresh object of the same type still get called; within
    ``no_retry_of_hung_calls`` (the hints) the function that hung is not called again at all."""
    src = {"pooling.py": "import torch\nCALLS = []\n"
                         "def masked_mean_pool(h, m):\n"
                         "    if h.dtype == torch.float32:\n        while True:\n            pass\n"
                         "    return h.sum(1)\n"
                         "def other(x):\n    return x + 1\n"}
    with sb.session(src, call_timeout_s=1.5) as impl:
        started = time.monotonic()
        with pytest.raises(SubmissionTimeout) as first:
            impl.pooling.masked_mean_pool(torch.zeros(2, 3, 4), torch.ones(2, 3))
        assert time.monotonic() - started >= 1.5
        message = str(first.value)
        assert "masked_mean_pool" in message and "1.5 s" in message and "did not return" in message, message
        started = time.monotonic()
        with pytest.raises(SubmissionTimeout) as again:  # other sizes, same kind: not called
            impl.pooling.masked_mean_pool(torch.zeros(5, 7, 8), torch.ones(5, 7))
        assert time.monotonic() - started < 0.5
        assert str(again.value) == message
        got = impl.pooling.masked_mean_pool(torch.ones(2, 3, 4, dtype=torch.float64), torch.ones(2, 3))
        assert got.shape == (2, 4) and float(got[0, 0]) == 3.0  # float64 is another kind: it ran
        assert impl.pooling.other(1) == 2
        with impl.no_retry_of_hung_calls():  # (the hints) a function that hung is not called at all
            started = time.monotonic()
            with pytest.raises(SubmissionTimeout) as in_hints:
                impl.pooling.masked_mean_pool(torch.ones(2, 3, 4, dtype=torch.float64), torch.ones(2, 3))
            assert time.monotonic() - started < 0.5 and str(in_hints.value) == message
            assert impl.pooling.other(1) == 2

@contextlib.contextmanager
def _a_timer_waits_once(after_s: float, for_s: float):
    """The quiet room's hooks (grader/bertlab_grader/performance/gate.py installs them in a grader worker): a timer
    waits ``after_s`` seconds into the block, and is done ``for_s`` seconds after the worker gave way."""
    from bertlab_grader.sandbox import give_way as hooks

    asked = time.monotonic() + after_s
    gave_way = []

    def give_way():
        gave_way.append(time.monotonic())
        time.sleep(for_s)

    hooks.install(lambda: not gave_way and time.monotonic() > asked, give_way)
    try:
        yield gave_way
    finally:
        hooks.install(None, None)


SPIN = ("import time\n"
        "def spin(cpu_s):\n"
        "    # Busy for cpu_s seconds of its own CPU time; the longest it went unscheduled, and its wall time.\n"
        "    start, cpu = time.monotonic(), time.process_time()\n"
        "    last = gap = 0.0\n"
        "    while time.process_time() - cpu < cpu_s:\n"
        "        now = time.monotonic()\n"
        "        gap, last = max(gap, now - (last or now)), now\n"
        "    return gap, time.monotonic() - start\n"
        "def forever():\n    while True:\n        pass\n")


@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
def test_a_call_stops_while_another_worker_times_and_that_time_is_not_counted(sb):
    """While another grader worker times, a waiting call's processes are stopped (SIGSTOP), and the
    time they were stopped does not count against the call's limit: 1 s of work that a 2 s pause
    interrupted still returns under a 2 s limit, and an endless loop still times out after its own
    limit of running time, with the usual message."""
    with sb.session({"cka.py": SPIN}, call_timeout_s=2.0) as impl:
        impl.cka.spin(0.01)  # (the child is up: the pause falls within the call)
        with _a_timer_waits_once(after_s=0.3, for_s=2.0) as gave_way:
            gap, wall = impl.cka.spin(1.0)
        assert gave_way, "the call never gave way to the waiting timer"
        assert gap >= 1.8, f"the submission went on running while the timer worked (longest pause {gap:.2f} s)"
        assert wall >= 2.8, wall  # 1 s of work and the 2 s pause: over the limit, yet no timeout
    with sb.session({"cka.py": SPIN}, call_timeout_s=1.5) as impl:
        impl.cka.spin(0.01)
        started = time.monotonic()
        with _a_timer_waits_once(after_s=0.3, for_s=1.0), pytest.raises(SubmissionTimeout) as hung:
            impl.cka.forever()
        assert time.monotonic() - started >= 2.5, "the pause was counted against the limit"
        assert "did not return within the 1.5 s limit" in str(hung.value), str(hung.value)


def test_crash_is_reported_with_its_cause(sb):
    src = {"cka.py": "import os\ndef die():\n    print('about to die', flush=True)\n    os._exit(3)\n"}
    with sb.session(src) as impl:
        with pytest.raises(SubmissionCrashed, match="exit code 3") as info:
            impl.cka.die()
        assert "about to die" in str(info.value)


def test_a_process_that_died_between_calls_is_reported_with_how_it_died(sb):
    """The process answers, then dies before the next call (here it kills itself): the next call says
    so, with the signal the template saw, as a crash within a call does."""
    src = {"cka.py": "import os, signal, threading\n"
                     "def answer_then_die():\n"
                     "    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGKILL)).start()\n"
                     "    return 1\n"
                     "def again():\n"
                     "    return 2\n"}
    with sb.session(src) as impl:
        assert impl.cka.answer_then_die() == 1
        time.sleep(1.0)
        with pytest.raises(SubmissionCrashed) as info:
            impl.cka.again()
    assert "died" in str(info.value) and "killed by SIGKILL" in str(info.value), str(info.value)


# ------------------------------------------------------------------------------------- isolation

SNOOP = ("import os, socket\n"
         "def probe(paths):\n"
         "    out = {}\n"
         "    for p in paths:\n"
         "        try:\n"
         "            out[p] = sorted(os.listdir(p)) if os.path.isdir(p) else open(p).read()\n"
         "        except OSError as e:\n"
         "            out[p] = type(e).__name__\n"
         "    return out\n"
         "def write(paths):\n"
         "    out = {}\n"
         "    for p in paths:\n"
         "        try:\n"
         "            with open(p, 'a') as f:\n"
         "                f.write('x')\n"
         "            out[p] = 'wrote'\n"
         "        except OSError as e:\n"
         "            out[p] = type(e).__name__\n"
         "    return out\n"
         "def connect(host, port):\n"
         "    try:\n"
         "        socket.create_connection((host, port), timeout=2).close()\n"
         "        return 'connected'\n"
         "    except OSError as e:\n"
         "        return type(e).__name__\n"
         "def whoami():\n"
         "    return os.getuid(), os.getcwd()\n"
         "def try_import(names):\n"
         "    import importlib\n"
         "    out = {}\n"
         "    for name in names:\n"
         "        try:\n"
         "            out[name] = importlib.import_module(name).__file__\n"
         "        except Exception as e:\n"
         "            out[name] = type(e).__name__\n"
         "    return out\n")


@pytest.fixture
def isolated(sb):
    if not BWRAP_INSTALLED:
        pytest.skip("bubblewrap (bwrap) is not installed: isolation cannot be tested")
    assert sb.isolated, "bubblewrap is installed, yet the sandbox runs without it"
    return sb


def test_hidden_paths_are_not_visible(isolated, course):
    """Of the kit, student code sees the student package and the one folder of sandboxed server code
    (grader/bertlab_grader/sandbox/inside/, mounted alone as bertlab_sandbox): no solutions, no hidden suites, no
    trusted grader code, under any name."""
    grader, inside = KIT / "grader" / "bertlab_grader", Path("/tmp/.bertlab-kit")
    paths = [str(course.root / "gradebook.db"), str(course.root / "submitted"), str(course.loose),
             str(KIT / "solutions"), str(KIT / "tests" / "hidden"), str(KIT / "solutions" / "cka.py"),
             str(KIT / "tests"), str(grader), str(grader.parent), str(KIT / "src"), str(KIT), str(inside),
             str(inside / "bertlab_sandbox"),
             "/root", "/etc/shadow"]
    with isolated.session({"cka.py": SNOOP}) as impl:
        seen = impl.cka.probe(paths)
        assert impl.cka.whoami()[0] != 0
        imported = impl.cka.try_import(["bertlab_grader.solutions.cka", "bertlab_grader.course.runner",
                                        "bertlab_grader.hidden.conftest", "bertlab_grader.sandbox.launcher",
                                        "bertlab_sandbox.server", "bertlab.models"])
    assert SECRET not in repr(seen)
    assert imported["bertlab_grader.solutions.cka"] == imported["bertlab_grader.course.runner"] \
        == imported["bertlab_grader.hidden.conftest"] == imported["bertlab_grader.sandbox.launcher"] \
        == "ModuleNotFoundError"
    assert imported["bertlab.models"].endswith("bertlab/models.py")
    assert imported["bertlab_sandbox.server"].endswith("bertlab_sandbox/server.py")
    for hidden in ("solutions", "tests/hidden", "solutions/cka.py", "tests", "grader", "grader/bertlab_grader"):
        assert seen[str(KIT / hidden)] == "FileNotFoundError", hidden
    assert seen[str(KIT)] == ["src"]
    assert seen[str(KIT / "src")] == ["bertlab"]
    assert seen[str(inside)] == ["bertlab_sandbox"]
    shown = {p.name for p in (grader / "sandbox" / "inside").iterdir() if p.name != "__pycache__"}
    assert set(seen[str(inside / "bertlab_sandbox")]) - {"__pycache__"} == shown
    assert seen[str(course.loose)] in ("", "PermissionError")  # /dev/null is mounted over it
    assert seen["/etc/shadow"] == "PermissionError"


def test_no_network(isolated):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    with listener, isolated.session({"cka.py": SNOOP}) as impl:
        assert impl.cka.connect("127.0.0.1", listener.getsockname()[1]) != "connected"
        assert impl.cka.connect("1.1.1.1", 53) != "connected"
        with pytest.raises(socket.timeout):
            listener.accept()


def test_writes_only_in_its_own_scratch_space(isolated, course):
    before = (course.root / "gradebook.db").read_text()
    targets = [str(course.root / "gradebook.db"), str(course.loose), str(KIT / "src" / "bertlab" / "x.py"),
               "/var/tmp/x", "/etc/x", "/root/x", "/dev/shm/x", "/tmp/leftover"]
    with isolated.session({"cka.py": SNOOP}) as impl:
        result = impl.cka.write(targets)
        _, cwd = impl.cka.whoami()
        assert impl.cka.write(["scratch.txt"]) == {"scratch.txt": "wrote"}
    assert {p: r for p, r in result.items() if r == "wrote"} == {"/tmp/leftover": "wrote"}
    assert (course.root / "gradebook.db").read_text() == before and course.loose.read_text() == SECRET
    # The next student starts with an empty /tmp, but for the folders through which a kit or Python
    # install that lives under /tmp is shown back (read-only; e.g. a fresh clone under /tmp).
    tmp = Path(os.path.realpath("/tmp"))
    shown = [Path(os.path.realpath(p)) for p in (KIT, sys.prefix, sys.base_prefix)]
    # (.bertlab-kit: the sandboxed server's folder, read-only; see TemplateCommand.inside_root)
    expected_tmp = sorted({"job", ".bertlab-kit"} | {p.relative_to(tmp).parts[0] for p in shown if tmp in p.parents})
    with isolated.session({"cka.py": SNOOP}) as impl:
        assert impl.cka.probe(["/tmp", cwd]) == {"/tmp": expected_tmp, cwd: []}


@pytest.mark.parametrize("where", ["site", "dist-packages"])
def test_installed_copies_of_secret_packages_are_hidden(monkeypatch, where):
    """A non-editable install copies bertlab_grader (its solutions/ and hidden/ with it) next to torch:
    hide it too, wherever it was installed."""
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"]).resolve()  # where pip installs the kit for this Python
    installed = (site if where == "site" else Path("/usr/lib/python3/dist-packages")) / "bertlab_grader"
    assert template_process.SECRET_PACKAGES == ("bertlab_grader",)
    real = template_process.package_dir
    monkeypatch.setattr(template_process, "package_dir",
                        lambda name: installed if name == "bertlab_grader" else real(name))
    args = template_process.TemplateCommand(KIT, [], isolated=True, uid=65534).bwrap_args()  # no process
    mounts = list(zip(args, args[1:]))
    assert ("--tmpfs", str(installed)) in mounts
    hidden_by = [b for a, b in mounts if a == "--tmpfs" and (Path(b) == KIT or Path(b) in KIT.parents)]
    assert hidden_by, "the kit must lie under a tmpfs (its own, or /tmp's when it lives under /tmp)"
    inside = KIT / "grader" / "bertlab_grader" / "sandbox" / "inside"
    assert ("--ro-bind", str(inside)) in mounts  # the server's folder, the one folder of the grader shown
    assert not any(a == "--ro-bind" and any(b.startswith(str(KIT / d)) for d in ("solutions", "tests", "grader"))
                   and b != str(inside) for a, b in mounts)
    if where == "site":
        # bwrap applies mounts in order. Where site-packages lies in a hidden folder (a venv under /tmp,
        # a Python under /root), the bind that shows it back must come before the tmpfs that hides the
        # package inside it; elsewhere (/usr) it is visible through "/" and nothing may hide it.
        shown = [i for i, (a, b) in enumerate(mounts) if a == "--ro-bind" and b != "/" and site.is_relative_to(b)]
        if shown:
            assert mounts.index(("--tmpfs", str(installed))) > max(shown)
        else:
            assert not any(a == "--tmpfs" and site.is_relative_to(b) for a, b in mounts), mounts


def test_fallback_without_bubblewrap_warns_and_still_works(sandboxes):
    fallback = sandboxes.fallback
    assert fallback.isolated is False
    assert FALLBACK_WARNING in sandboxes.fallback_stderr
    X, Y = torch.randn(6, 3), torch.randn(6, 2)
    with fallback.session(sources("correct")) as impl:
        assert impl.cka.linear_cka(X, Y) == pytest.approx(reference_cka(X, Y))
    src = {"cka.py": "import os, time\ndef spawn():\n    pid = os.fork()\n    if pid == 0:\n        os.setsid()\n"
                     "        time.sleep(600)\n        os._exit(0)\n    return os.getpid(), pid\n"}
    template, generation = fallback._proc.pid, fallback.generation
    with fallback.session(src) as impl:  # without a pid namespace, leftovers are found by ancestry
        child, grandchild = impl.cka.spawn()
    # Both killed when the session ends (the grandchild left the child's session, so only ancestry
    # finds it); the template reaps them as soon as the kernel has freed their memory (it does not
    # wait for that: a process inside exit() runs nothing of its own again).
    deadline = time.monotonic() + 2.0
    while any(Path(f"/proc/{p}").exists() for p in (child, grandchild)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not Path(f"/proc/{grandchild}").exists(), "a process the submission started outlived its session"
    assert not Path(f"/proc/{child}").exists(), "the submission's process outlived its session"
    assert (fallback._proc.pid, fallback.generation) == (template, generation), \
        "ending the job restarted the template (and so orphaned what the job left)"


def test_the_template_preloads_every_named_model_the_hidden_suites_use():
    """A named model missing from DEFAULT_PRELOAD still works (the server builds it), but every
    submission then pays for building it: keep the list in step with the hidden suites (tests/hidden/)."""
    import re

    from bertlab_grader.core.locations import SUITES_DIR as hidden

    used = {name for path in hidden.glob("*.py")
            for name in re.findall(r"""(?:named_model|tiny_bert)\(\s*["']([\w-]+)["']""", path.read_text())}
    used |= {f"tiny-bert-seed{k}" for path in hidden.glob("*.py")
             for k in re.findall(r"""["']tiny-bert-seed(\d+)["']""", path.read_text())}
    assert used, "found no named models in the hidden suites: has the suite changed how it names them?"
    assert used <= set(template_process.DEFAULT_PRELOAD), sorted(used - set(template_process.DEFAULT_PRELOAD))


# ------------------------------------------------------------------------------ failing closed

BROKEN_BWRAP_MESSAGE = ("bwrap: No permissions to create new namespace, likely because the kernel does "
                        "not allow non-privileged user namespaces.")


@pytest.fixture
def no_bubblewrap(monkeypatch, tmp_path):
    """bubblewrap "not installed": a PATH without bwrap, and none of the usual places count."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(bubblewrap, "BWRAP_CANDIDATES", ())  # where find_bwrap looks
    monkeypatch.setattr(launcher, "_warned", False)


@pytest.fixture
def broken_bubblewrap(monkeypatch, tmp_path):
    """A bwrap first on PATH that fails as one does in a container without user namespaces."""
    folder = tmp_path / "broken-bin"
    folder.mkdir()
    stand_in = folder / "bwrap"
    stand_in.write_text(f"#!/bin/sh\necho '{BROKEN_BWRAP_MESSAGE}' >&2\nexit 1\n")
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
    monkeypatch.setattr(launcher, "_warned", False)
    return stand_in


def test_missing_bubblewrap_refuses_to_run_student_code(no_bubblewrap):
    works, why = bubblewrap_status()
    assert works is False and "not installed" in why
    with pytest.raises(SandboxUnavailable) as info:
        Sandbox(kit_root=KIT, preload=())
    message = str(info.value)
    assert isinstance(info.value, SandboxError) and isinstance(info.value, GraderFailure)
    assert isinstance(info.value, RuntimeError)
    assert "not installed" in message and "apt-get install bubblewrap" in message
    assert "--unsafe-no-sandbox" in message and len(message.splitlines()) <= 2
    with pytest.raises(SandboxUnavailable):
        Sandbox(kit_root=KIT, preload=(), use_bwrap=True, unsafe_no_sandbox=True)  # required wins


def test_bubblewrap_that_cannot_create_namespaces_refuses_to_run_student_code(broken_bubblewrap):
    works, why = bubblewrap_status()
    assert works is False and str(broken_bubblewrap) in why and BROKEN_BWRAP_MESSAGE in why
    with pytest.raises(SandboxUnavailable) as info:
        Sandbox(kit_root=KIT, preload=())
    message = str(info.value)
    assert BROKEN_BWRAP_MESSAGE in message and "kernel.unprivileged_userns_clone=1" in message
    assert "--unsafe-no-sandbox" in message and len(message.splitlines()) <= 2


def test_unsafe_no_sandbox_runs_unisolated_and_says_so(broken_bubblewrap, capfd):
    sandbox = Sandbox(kit_root=KIT, preload=(), unsafe_no_sandbox=True)
    try:
        assert sandbox.isolated is False
        assert FALLBACK_WARNING in capfd.readouterr().err
        X = torch.randn(6, 3)
        with sandbox.session(sources("correct")) as impl:
            assert impl.cka.linear_cka(X, X) == pytest.approx(1.0)
    finally:
        sandbox.close()


def test_bubblewrap_status_probes_again_when_the_binary_changes(monkeypatch, tmp_path):
    """The probe result is cached per binary: a stand-in first on PATH is probed, not the cached
    answer for the real one, and the real one's answer comes back when PATH does."""
    if not BWRAP_INSTALLED:
        pytest.skip("bubblewrap (bwrap) is not installed")
    works, why = bubblewrap_status()
    assert works, f"bubblewrap is installed but does not work here: {why}"
    assert why.startswith("bubblewrap") and "creates its namespaces" in why
    with monkeypatch.context() as patch:
        folder = tmp_path / "bin"
        folder.mkdir()
        (folder / "bwrap").write_text("#!/bin/sh\necho 'stand-in says no' >&2\nexit 1\n")
        (folder / "bwrap").chmod(0o755)
        patch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
        assert bubblewrap_status() == (False, f"bubblewrap at {folder / 'bwrap'} cannot create its sandbox: "
                                              "stand-in says no")
    assert bubblewrap_status() == (works, why)


# ------------------------------------------------- the grader's failures are not the student's

def test_a_template_that_dies_before_it_is_ready_is_the_graders_failure():
    sandbox = Sandbox(kit_root=KIT, preload=(), unsafe_no_sandbox=not BWRAP_INSTALLED, start_timeout_s=30.0)
    try:
        sandbox._proc.kill()
        with pytest.raises(SandboxError) as info:
            with sandbox.session(sources("correct")) as impl:
                impl.cka.linear_cka(torch.ones(3, 2), torch.ones(3, 2))
        assert not isinstance(info.value, StudentError)
    finally:
        sandbox.close()


@pytest.mark.skipif(not BWRAP_INSTALLED, reason="bubblewrap is not installed")
def test_mounts_that_stop_the_template_are_named_in_bubblewraps_own_words(monkeypatch):
    """The mounts are tried only when the template does not come up (a trial start per worker cost
    seconds of every cohort's start-up); then bwrap's own words say what is wrong."""
    real = template_process.TemplateCommand.bwrap_args

    def with_a_missing_source(self):
        bwrap, *options = real(self)
        return [bwrap, "--ro-bind", "/nonexistent-bertlab-mount", "/mnt/missing", *options]

    monkeypatch.setattr(template_process.TemplateCommand, "bwrap_args", with_a_missing_source)
    sandbox = Sandbox(kit_root=KIT, preload=(), start_timeout_s=30.0)
    try:
        with pytest.raises(SandboxError, match="cannot start with its mounts") as info:
            sandbox.wait_ready()
        assert "nonexistent-bertlab-mount" in str(info.value)
    finally:
        sandbox.close()


def test_a_child_that_dies_before_any_submitted_code_runs_is_the_graders_failure(sb, monkeypatch):
    """The child's own set-up fails (here: limits it cannot apply) before it imports anything of
    the submission: SandboxError, not a crash scored against the student; and its report names
    the server's files without their sandbox-side folders."""
    monkeypatch.setattr(sb, "limits", ["not", "a", "dict"])
    with pytest.raises(SandboxError) as info:
        with sb.session(sources("correct")) as impl:
            impl.cka.linear_cka(torch.ones(3, 2), torch.ones(3, 2))
    message = str(info.value)
    assert not isinstance(info.value, StudentError) and "before any submitted code ran" in message
    assert "confine.py" in message and str(KIT) not in message and sys.prefix not in message
    monkeypatch.undo()
    with sb.session(sources("correct")) as impl:  # and the sandbox goes on
        assert impl.cka.linear_cka(torch.eye(3), torch.eye(3)) == pytest.approx(1.0)


def test_text_for_the_student_names_no_sandbox_side_folders(sb):
    """Exception messages, a thread's traceback, a library warning and the captured output name
    files relative to the kit or the Python install, never where those live."""
    src = {"cka.py": "import threading, warnings, torch, bertlab\n"
                     "def noisy():\n"
                     "    print('loaded from', torch.__file__, flush=True)\n"
                     "    t = threading.Thread(target=lambda: 1 / 0)\n"
                     "    t.start()\n"
                     "    t.join()\n"
                     "    warnings.warn_explicit('from a library', UserWarning, torch.__file__, 7)\n"
                     "    return 1\n"
                     "def open_library_file():\n"
                     "    open(torch.__file__ + '.missing')\n"
                     "def open_kit_file():\n"
                     "    open(bertlab.__file__ + '.missing')\n"}
    with sb.session({**sources("correct"), **src}) as impl:
        assert impl.cka.noisy() == 1
        with pytest.raises(StudentError) as library:
            impl.cka.open_library_file()
        with pytest.raises(StudentError) as kit:
            impl.cka.open_kit_file()
        output = impl.output()
    texts = [output, str(library.value), str(kit.value)]
    assert "ZeroDivisionError" in output and "from a library" in output and "torch/__init__.py" in output
    assert "torch/__init__.py.missing" in str(library.value) and "bertlab/__init__.py.missing" in str(kit.value)
    for text in texts:
        assert str(KIT) not in text and sys.prefix not in text and os.path.realpath(sys.prefix) not in text, text


HEAP_PROBE = '''
import torch

def big_block_is_on_the_heap():
    """Whether an 8 MiB tensor comes from the heap (malloc's thresholds pinned) or fresh pages."""
    block = torch.empty(2**21)  # 8 MiB of float32
    address = block.data_ptr()
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith("[heap]"):
                low, high = (int(x, 16) for x in line.split()[0].split("-"))
                if low <= address < high:
                    return True
    return False
'''


def test_a_childs_garbage_collection_walks_only_its_own_objects(sb):
    """The template freezes what it loaded (torch, transformers, MiniLM: hundreds of thousands of
    objects) before it forks a child, so a full collection in the child (peak_memory's, before each
    measured call) walks the child's own objects only. Unfrozen, each cost 0.18 s a call."""
    src = ("import gc\n"
           "def frozen_and_tracked():\n    return gc.get_freeze_count(), len(gc.get_objects())\n"
           "def collected_after_a_cycle():\n"
           "    a = []; a.append(a); del a\n    return gc.collect()\n")
    with sb.session({"cka.py": src}) as impl:
        frozen, tracked = impl.cka.frozen_and_tracked()
        assert frozen > 10 * tracked, (
            f"{frozen} objects frozen in the child against {tracked} it tracks: the template did not call "
            "gc.freeze() after its imports")
        assert impl.cka.collected_after_a_cycle() >= 1, "the child's own garbage is no longer collected"


def test_timed_code_allocates_on_a_steady_footing_on_both_sides(sb):
    """The performance task pins glibc's malloc thresholds in the sandbox (its environment) and in the
    grader (sandbox/malloc_pin.py steady_allocator, called by performance/timing.py): a buffer of megabytes then comes from the heap on both
    sides, instead of fresh pages whose faults depend on each process's history (docs/hidden-suites.md,
    "Where the spread comes from")."""
    from bertlab_grader.sandbox.malloc_pin import steady_allocator

    with sb.session({"cka.py": HEAP_PROBE}) as impl:
        assert impl.cka.big_block_is_on_the_heap() is True, "the sandbox's malloc is not pinned"
    namespace: dict = {}
    exec(HEAP_PROBE, namespace)
    assert steady_allocator() is True
    assert namespace["big_block_is_on_the_heap"]() is True, "the grader's malloc is not pinned"


ENVIRONMENT_PROBE = '''
import json, os, sys
import torch


def environment():
    return json.dumps({"env": dict(os.environ), "torch_threads": torch.get_num_threads(),
                       "hash_randomized": sys.flags.hash_randomization})
'''


def environment_of_a_fresh_sandbox() -> dict:
    """ENVIRONMENT_PROBE's answer in a sandbox started now, from this process's environment."""
    sandbox = Sandbox(kit_root=KIT)
    try:
        with sandbox.session({"cka.py": ENVIRONMENT_PROBE}) as impl:
            return json.loads(impl.cka.environment())
    finally:
        sandbox.close()


@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
def test_the_sandboxs_environment_does_not_depend_on_what_the_grader_inherited(monkeypatch):
    """A Dask nanny starts its workers with OMP/MKL/OPENBLAS_NUM_THREADS=1, MALLOC_TRIM_THRESHOLD_=65536
    and a fixed PYTHONHASHSEED (docs/cluster.md): a sandbox started there must see what one started
    anywhere else sees, or a timing (and a grade) would depend on where it ran."""
    for name in THREAD_VARIABLES:  # (the suite's workers set them under -n: the plain side starts without)
        monkeypatch.delenv(name, raising=False)
    plain = environment_of_a_fresh_sandbox()
    for name, value in {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                        "MALLOC_TRIM_THRESHOLD_": "65536", "PYTHONHASHSEED": "6640"}.items():
        monkeypatch.setenv(name, value)
    nanny = environment_of_a_fresh_sandbox()
    assert nanny == plain, (f"the sandbox's environment changed with the grader's: {sorted(set(nanny['env'].items()) ^ set(plain['env'].items()))}, "
                            f"torch threads {nanny['torch_threads']} against {plain['torch_threads']}")
    assert plain["env"]["MALLOC_TRIM_THRESHOLD_"] != "65536", "the sandbox's malloc pin was overridden"


def test_the_sandbox_is_the_template_host_the_session_names():
    """sandbox/session.py calls back into the launcher's Sandbox through TemplateHost only: the
    launcher imports the session, so the interface is written down there, and both sides must keep to it."""
    import ast
    import typing

    from bertlab_grader.sandbox.launcher import Sandbox
    from bertlab_grader.sandbox.session import TemplateHost

    members = {name for name in vars(TemplateHost) if not name.startswith("_")} | set(typing.get_type_hints(TemplateHost))
    sandbox_members = set(dir(Sandbox)) | set(Sandbox.__init__.__code__.co_names)
    assert members - sandbox_members == set(), f"Sandbox lacks {sorted(members - sandbox_members)}"
    session = ast.parse((KIT / "grader" / "bertlab_grader" / "sandbox" / "session.py").read_text(encoding="utf-8"))
    used = {node.attr for node in ast.walk(session)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
            and node.value.attr == "sandbox" and isinstance(node.value.value, ast.Name) and node.value.value.id == "self"}
    assert used and used <= members, f"the session uses {sorted(used - members)} of the Sandbox beyond TemplateHost"
