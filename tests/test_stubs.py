"""exercises/ is generated from the reference (solutions/): it must be fresh, leak
nothing, and fail task by task."""

import subprocess
import sys
from pathlib import Path

import pytest

from bertlab.errors import NotImplementedYet
from bertlab.implementations import load_directory, load_implementation
from bertlab.tasks import EXERCISE_MODULES, EXERCISE_TASKS
from bertlab_grader.authoring import stubs as stubgen
from bertlab_grader.core.locations import REFERENCE_DIR

KIT_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", [f"{t}.py" for t in EXERCISE_MODULES])
def test_committed_exercises_are_fresh(name):
    expected = stubgen.expected_exercises()[name]
    actual = (KIT_ROOT / "exercises" / name).read_text()
    assert actual == expected, (
        f"exercises/{name} is stale: it differs from what solutions/{name} generates. "
        "Run `python tools/build_exercises.py` and commit the result."
    )


def test_build_exercises_tool_reports_a_stale_file_and_rewrites_it(tmp_path, monkeypatch):
    sys.path.insert(0, str(KIT_ROOT / "tools"))
    try:
        import build_exercises
    finally:
        sys.path.remove(str(KIT_ROOT / "tools"))
    monkeypatch.setattr(build_exercises, "EXERCISES", tmp_path)
    assert build_exercises.main(["--check"]) == 1  # empty folder: everything is stale
    assert build_exercises.main([]) == 0
    assert build_exercises.main(["--check"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(build_exercises.expected_files())
    # The committed copy is current (what CI would otherwise catch file by file above).
    done = subprocess.run([sys.executable, str(KIT_ROOT / "tools" / "build_exercises.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_stubs_contain_no_solution_code():
    for name, text in stubgen.expected_exercises().items():
        assert stubgen.BEGIN not in text and stubgen.END not in text, f"{name} still has a solution fence"
        solution = (REFERENCE_DIR / name).read_text()
        fenced = solution.split(stubgen.BEGIN)[1].split(stubgen.END)[0]
        distinctive = [line.strip() for line in fenced.splitlines() if len(line.strip()) > 30]
        leaked = [line for line in distinctive if line in text]
        assert not leaked, f"{name} leaks solution lines: {leaked[:2]}"


def test_mistake_texts_contain_no_solution_code():
    # The table of known mistakes ships to students: hints, never a line of a solution.
    import re

    from bertlab.mistakes import MISTAKES

    hints = "\n".join(m.hint for m in MISTAKES)
    for name in (f"{module}.py" for module in EXERCISE_MODULES):
        fenced = "\n".join(part.split(stubgen.END)[0] for part in (REFERENCE_DIR / name).read_text().split(stubgen.BEGIN)[1:])
        for line in fenced.splitlines():
            code = re.sub(r"^(return |[\w, ]+ = )", "", line.split("#")[0].strip())
            assert len(code) < 20 or code not in hints, f"a mistake's hint quotes {name}: {code!r}"


def test_every_stub_raises_a_task_specific_not_implemented():
    stubs = load_directory(KIT_ROOT / "exercises")
    cases = {
        ("cka", "linear_cka"): lambda: stubs.cka.linear_cka([[0.0, 1.0], [1.0, 0.0]], [[1.0], [2.0]]),
        ("pooling", "masked_mean_pool"): lambda: stubs.pooling.masked_mean_pool(__import__("torch").zeros(1, 2, 3),
                                                                               __import__("torch").ones(1, 2)),
        ("siamese", "create_sbert"): lambda: stubs.siamese.create_sbert(None),
        ("retrieval", "semantic_search"): lambda: stubs.retrieval.semantic_search(__import__("torch").ones(2),
                                                                                 __import__("torch").ones(3, 2)),
    }
    for (task, function), call in cases.items():
        if task not in EXERCISE_TASKS:
            continue  # a task this kit's registry no longer has (bertlab remove-task)
        with pytest.raises(NotImplementedYet) as info:
            call()
        assert isinstance(info.value, NotImplementedError)  # `except NotImplementedError` still catches it
        assert (info.value.task, info.value.function) == (task, function)
        assert str(info.value) == f"{task}: implement {function} (see its docstring)"


def test_stubs_raise_the_typed_exception_and_import_it_with_their_imports():
    for name, text in stubgen.expected_exercises().items():
        task = name.removesuffix(".py")
        assert "raise NotImplementedError" not in text, name
        raises = [line.strip() for line in text.splitlines() if line.strip().startswith("raise NotImplementedYet(")]
        assert raises and all(line.startswith(f'raise NotImplementedYet("{task}", "') for line in raises), name
        lines = text.splitlines()
        where = lines.index("from bertlab.errors import NotImplementedYet")
        assert lines[where - 1] == "" and lines[where + 1] == "", f"{name}: the import is a block of its own"
        first_def = next(i for i, line in enumerate(lines) if line.startswith(("def ", "class ")))
        assert where < first_def and "from __future__ import annotations" in "\n".join(lines[:where]), name


def test_signatures_and_docstrings_are_kept():
    import inspect

    stubs, reference = load_directory(KIT_ROOT / "exercises"), load_implementation("reference")
    for module in EXERCISE_MODULES:
        for name, obj in vars(getattr(reference, module)).items():
            if name.startswith("_") or not callable(obj) or getattr(obj, "__module__", "") != f"bertlab_grader.solutions.{module}":
                continue
            twin = getattr(getattr(stubs, module), name)
            assert inspect.signature(twin) == inspect.signature(obj), f"{module}.{name} signature drifted"
            assert inspect.getdoc(twin) == inspect.getdoc(obj), f"{module}.{name} docstring drifted"


def test_unbalanced_fences_are_refused():
    with pytest.raises(stubgen.FenceError, match="never closed"):
        stubgen.make_stub('def f():\n    ### BEGIN SOLUTION\n    return 1\n', "cka")
    with pytest.raises(stubgen.FenceError, match="without a matching"):
        stubgen.make_stub('def f():\n    return 1\n    ### END SOLUTION\n', "cka")
