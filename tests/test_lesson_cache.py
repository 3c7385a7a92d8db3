"""The lesson's slow steps on student code, kept in the kit's cache for the same code (bertlab.lesson.cached_step).

A step's key holds the digest of exactly the task files it uses, read when the notebook loaded them:
the same files give the kept result without computing, an edit to one of them computes again, an
edit to a file the step does not use changes nothing. The entries follow the cache's naming rule, so
`bertlab lesson --clear-cache` lists and removes them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bertlab import cache, lesson

KIT_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """An exercises folder holding the reference's code for every task, and a private kit cache."""
    from bertlab_grader.core.locations import reference_sources

    target = tmp_path / "exercises"
    shutil.copytree(KIT_ROOT / "exercises", target, ignore=shutil.ignore_patterns("*.ipynb"))
    for name, text in reference_sources().items():
        (target / name).write_text(text, encoding="utf-8")
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path / "cache"))
    yield target
    lesson.load_lesson_implementation("reference")  # leave the module's session as the other tests expect


def _step(calls: list, uses=("pooling",), retrain: bool = False, **settings) -> dict:
    def compute() -> dict:
        calls.append(1)
        return {"accuracy": 0.5 + len(calls) / 100}

    return lesson.cached_step("scratch", uses=uses, compute=compute, label="the step", settings=settings,
                              kit_modules=("finetune",), retrain=retrain)


def _edit(path: Path) -> None:
    path.write_text(path.read_text(encoding="utf-8") + "\n# a student's comment\n", encoding="utf-8")


def test_the_same_files_load_the_kept_result_and_an_edit_computes_again(folder, capsys):
    lesson.load_lesson_implementation(str(folder))
    calls: list = []
    first = _step(calls)
    out = capsys.readouterr().out
    assert "kept in the kit's cache" in out and f"this same {folder / 'pooling.py'}" in out
    again = _step(calls)
    assert len(calls) == 1 and not first["from_cache"] and again["from_cache"] and again["source"] == "cache"
    assert again["accuracy"] == first["accuracy"] and again["cache_path"] == first["cache_path"]
    assert "loaded from the kit's cache" in capsys.readouterr().out
    # A file the step does not use: still the kept result.
    _edit(folder / "cka.py")
    lesson.load_lesson_implementation(str(folder))
    assert _step(calls)["from_cache"] and len(calls) == 1
    # The file it uses: computed again, under another entry.
    _edit(folder / "pooling.py")
    lesson.load_lesson_implementation(str(folder))
    edited = _step(calls)
    assert len(calls) == 2 and not edited["from_cache"] and edited["cache_path"] != first["cache_path"]
    # Other settings, or retrain: computed again too.
    _step(calls, preset="other")
    assert len(calls) == 3
    assert not _step(calls, retrain=True)["from_cache"] and len(calls) == 4


def test_a_step_that_uses_two_files_computes_again_when_either_changes(folder):
    lesson.load_lesson_implementation(str(folder))
    calls: list = []
    _step(calls, uses=("siamese", "pooling"))
    _step(calls, uses=("siamese", "pooling"))
    assert len(calls) == 1
    for name in ("siamese.py", "pooling.py"):
        _edit(folder / name)
        lesson.load_lesson_implementation(str(folder))
        _step(calls, uses=("siamese", "pooling"))
    assert len(calls) == 3


def test_the_key_is_the_code_that_was_loaded_not_a_file_edited_since(folder):
    # The kernel runs the code it imported; an edit shows only after the notebook loads it again.
    lesson.load_lesson_implementation(str(folder))
    calls: list = []
    _step(calls)
    _edit(folder / "pooling.py")
    assert _step(calls)["from_cache"] and len(calls) == 1


def test_the_same_file_in_another_folder_is_the_same_code(folder, tmp_path):
    lesson.load_lesson_implementation(str(folder))
    calls: list = []
    _step(calls)
    copy = shutil.copytree(folder, tmp_path / "elsewhere" / "exercises")
    lesson.load_lesson_implementation(str(copy))
    assert _step(calls)["from_cache"] and len(calls) == 1


def test_a_task_without_a_file_is_never_cached(folder, monkeypatch):
    lesson.load_lesson_implementation(str(folder))
    monkeypatch.setitem(lesson._source_digests, "pooling", None)
    calls: list = []
    _step(calls)
    result = _step(calls)
    assert len(calls) == 2 and not result["from_cache"]
    assert not (Path(cache.cache_root()).exists() and any(cache.cache_root().iterdir()))


def test_a_damaged_entry_is_computed_again_and_replaced(folder):
    lesson.load_lesson_implementation(str(folder))
    calls: list = []
    path = Path(_step(calls)["cache_path"])
    path.write_text("{not json", encoding="utf-8")
    assert not _step(calls)["from_cache"] and len(calls) == 2
    assert json.loads(path.read_text(encoding="utf-8"))["result"]["accuracy"] == 0.52


def test_entries_follow_the_naming_rule_and_clear_cache_removes_them(folder):
    lesson.load_lesson_implementation(str(folder))
    _step([])
    lesson.cached_step("stsb-sbert", uses=("siamese", "pooling"), compute=lambda: {"spearman": 0.82}, label="SBERT")
    names = sorted(path.name for path, _ in cache.cache_entries())
    assert len(names) == 2 and names[0].startswith("scratch-") and names[1].startswith("stsb-sbert-"), names
    assert all(cache._CACHE_ENTRY.match(name) and name.endswith(".json") for name in names)
    removed, left = cache.clear_cache()
    assert len(removed) == 2 and left == [] and not cache.cache_root().exists()


def test_an_entry_name_must_be_lower_case_words():
    with pytest.raises(ValueError, match="lower-case words"):
        cache.entry_path("STS benchmark", {})


def test_the_reference_digests_are_those_of_its_files():
    import hashlib

    impl = lesson.load_lesson_implementation("reference")
    digests = lesson.source_digests(impl)
    assert digests["pooling"] == hashlib.sha256(Path(impl.pooling.__file__).read_bytes()).hexdigest()
    assert len(set(digests.values())) == len(digests)  # four different files


def test_a_helper_module_beside_the_task_files_is_part_of_every_key(folder):
    # A student's pooling.py may import a helper of their own: an edit there computes again too.
    (folder / "helpers.py").write_text("SCALE = 1\n", encoding="utf-8")
    lesson.load_lesson_implementation(str(folder))
    calls: list = []
    _step(calls)
    _step(calls)
    _edit(folder / "helpers.py")
    lesson.load_lesson_implementation(str(folder))
    _step(calls)
    assert len(calls) == 2
