"""Compute the lesson figures that ship with the kit: the notebook's MiniLM fine-tuning (for kit developers).

    python tools/build_lesson_figures.py --threads 2     # train (about 2 min on 2 cores) and write the file
    python tools/build_lesson_figures.py --check         # does the shipped file match the notebook's run? (no training)

Concept 3 of the lesson notebook fine-tunes the packaged all-MiniLM-L6-v2 with the "cpu" preset (63
steps of 16 IMDb reviews, then 500 held out). That run calls none of the student's code, so its
figures are the same for every student: they are computed once here, by the kit's own training loop
(bertlab.finetune.finetune_classifier, the very function the notebook calls), and ship as package data
in src/bertlab/data/lesson_figures/ (a few KB of JSON: accuracy, loss curve, minutes, not the weights).
The notebook shows them at once and says they were computed when the kit was built; RETRAIN = True
in the notebook trains the same run on the student's machine.

The file holds the run's key (bertlab.finetune.finetune_key: model, settings, the reviews' digests,
CACHE_FORMAT). The notebook uses the shipped figures only when that key is the one it asks for, so a
change to the preset, the reviews or the training loop (bump CACHE_FORMAT) makes it train again until
this script is rerun; tests/test_finetune.py fails in the meantime.

Training is seeded: given the same torch build and thread count, a rerun writes the same figures (the
time aside); across machines they agree to a fraction of a point.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch

from bertlab import datasets, finetune


def notebook_run() -> tuple[str, list, list, finetune.FinetuneSettings]:
    """(model, training reviews, held-out reviews, settings) of the notebook's default fine-tuning run."""
    settings = finetune.get_settings(finetune.SHIPPED_PRESET)
    train, held_out = datasets.split_train_eval(settings.n_train, settings.n_eval, source="imdb", seed=0)
    return finetune.SHIPPED_MODEL, train, held_out, settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only say whether the shipped figures are those of the notebook's run (exit 1 if not)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice; the shipped file: 2)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    model, train, held_out, settings = notebook_run()
    key = finetune.finetune_key(model, train, held_out, settings)
    path = finetune.shipped_finetune_path(model, settings)
    if args.check:
        shipped = finetune.shipped_finetune(key)
        if shipped is None:
            print(f"{path} does not hold the figures of the notebook's run (missing, or another key): "
                  "run python tools/build_lesson_figures.py --threads 2")
            return 1
        print(f"{path} holds the notebook's run: accuracy {shipped['accuracy']:.3f}, built {shipped['built']['at']}")
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    result = finetune.finetune_classifier(model, train, held_out, preset=settings, verbose=True)
    built = {"at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": "python tools/build_lesson_figures.py"
             + (f" --threads {args.threads}" if args.threads else ""), "threads": torch.get_num_threads(),
             "torch": torch.__version__, "transformers": __import__("transformers").__version__,
             "python": platform.python_version(), "wall_minutes": round((time.perf_counter() - started) / 60, 2)}
    finetune.write_shipped_finetune(path, key, result, built)
    print(f"wrote {path} ({path.stat().st_size / 1e3:.1f} KB): held-out accuracy {result['accuracy']:.3f} after "
          f"{result['steps']} steps, {result['minutes']:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
