"""Imported once by the grader workers' fork server (``bertlab_grader.course.runner.start_workers``): the set-up every
grader worker needs, paid once per cohort run instead of once per worker.

It imports torch, transformers' BERT code and the hidden suites (``bertlab_grader.grading.scoring.import_grading_code``)
in the fork server; each grader worker is then forked from it and loads MiniLM and the reference data
(``warm_up``: under a second once the reference data is kept on disk, grader/bertlab_grader/core/kept_reference.py)
while its sandbox's template starts: the two warm-ups overlap, where a fork server that loaded
everything would keep every sandbox waiting for it. Only trusted code runs
here: no student code is ever imported into a grader process.

Fork safety: torch is limited to one thread before any tensor work, so no OpenMP pool exists to be
lost in the fork, and the tokenizers' thread pool is switched off for the same reason.
"""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

torch.set_num_threads(1)

import gc  # noqa: E402

from bertlab_grader.grading.scoring import import_grading_code  # noqa: E402

try:
    import_grading_code()
except Exception:  # noqa: BLE001 - each worker warms up on its own and reports the error its own way
    pass
gc.collect()
gc.freeze()  # (shared with every worker, copy-on-write: out of the collector's view, it stays shared)
