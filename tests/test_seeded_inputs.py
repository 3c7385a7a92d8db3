"""Large test inputs built where the submission runs (bertlab.teaching.retrieval.seeded_rows).

The memory test sends the sandbox a recipe (shape, seed, rows) instead of tens of MiB of corpus; the
grader builds the same tensor from the same recipe to check the answer. These tests hold the two
promises that makes: another process builds the very same tensor (whatever its thread count), and
the probe reports what it built, so a grader can tell when it did not.
"""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from bertlab.teaching.retrieval import input_fingerprint, search_memory, seeded_rows

RECIPE = {"shape": [100_000, 4], "seed": 271}


def reference_search(queries, corpus, top_k=10):
    """Every cosine at once, then top-k: right, and small enough here."""
    scores = torch.nn.functional.normalize(queries, dim=1) @ torch.nn.functional.normalize(corpus, dim=1).T
    return torch.topk(scores, top_k, dim=1)


def test_a_recipe_is_the_seeded_draw_cut_to_its_rows():
    drawn = torch.randn(100_000, 4, generator=torch.Generator().manual_seed(271))
    assert torch.equal(seeded_rows(RECIPE), drawn)
    assert torch.equal(seeded_rows({**RECIPE, "rows": 1000}), drawn[:1000])
    assert seeded_rows({**RECIPE, "rows": 1000}).shape == (1000, 4)


def test_each_use_gets_its_own_copy():
    first = seeded_rows(RECIPE)
    first.zero_()  # code that changes its input in place
    assert seeded_rows(RECIPE).abs().sum() > 0, "the next use got the changed tensor"


def test_another_process_builds_the_same_tensor_bit_for_bit():
    script = ("import json, torch\nfrom bertlab.teaching.retrieval import input_fingerprint, seeded_rows\n"
              "torch.set_num_threads(1)\n"
              f"print(json.dumps(input_fingerprint(seeded_rows({RECIPE!r}))))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == input_fingerprint(seeded_rows(RECIPE))


def test_the_probe_reports_what_it_built_and_searches_it():
    queries_recipe = {"shape": [8, 4], "seed": 270}
    corpus_recipe = {**RECIPE, "rows": 5000}
    report = search_memory(reference_search, queries_recipe, corpus_recipe, 10)
    queries, corpus = seeded_rows(queries_recipe), seeded_rows(corpus_recipe)
    assert report["built"] == [input_fingerprint(queries), input_fingerprint(corpus)]
    scores, indices = report["result"]
    expected_scores, expected_indices = reference_search(queries, corpus)
    assert torch.equal(torch.as_tensor(indices), expected_indices)
    assert torch.allclose(torch.as_tensor(scores), expected_scores)


def test_a_different_input_has_a_different_fingerprint():
    corpus = seeded_rows(RECIPE)
    assert input_fingerprint(seeded_rows({**RECIPE, "seed": 272})) != input_fingerprint(corpus)
    assert input_fingerprint(corpus[:99_999]) != input_fingerprint(corpus)
    changed = corpus.clone()
    changed[0, 0] += 1e-6  # the first row is always among those compared
    assert input_fingerprint(changed) != input_fingerprint(corpus)
