"""Imported once by the grader workers' fork server (``bertlab_grader.course.runner.start_workers``): the set-up every
grader worker needs, paid once per cohort run instead of once per worker.

It loads torch, transformers, MiniLM and the hidden suites' reference data (``bertlab_grader.grading.scoring.warm_up``)
in the fork server; each grader worker is then forked from it, already warm. Only trusted code runs
here: no student code is ever imported into a grader process.

Fork safety: torch is limited to one thread before any tensor work, so no OpenMP pool exists to be
lost in the fork, and the tokenizers' thread pool is switched off for the same reason.
"""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

torch.set_num_threads(1)

from bertlab_grader.grading.scoring import warm_up  # noqa: E402

try:
    warm_up()
except Exception:  # noqa: BLE001 - each worker calls warm_up() again and reports the error its own way
    pass
