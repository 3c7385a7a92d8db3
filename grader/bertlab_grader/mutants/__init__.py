"""The mutant bank: realistic wrong submissions, and correct-but-different ones (variants).

    recipe.py        how an entry is written (Mutant: one or two exact text swaps in one file of
                     solutions/, one realistic mistake; Variant: whole functions replaced by a
                     different, correct implementation) and built (entry_files)
    cka.py, pooling.py, siamese.py, retrieval.py
                     the entries of each task
    bank.py          all of them; ``load_bank`` builds each entry from its recipe and the current
                     solutions (fences stripped) as a full submission directory in a private
                     temporary directory (``Entry.path``)

Nothing else is stored. A recipe whose text no longer matches the solutions exactly once fails loudly
when the bank is loaded. The audit (grader/bertlab_grader/authoring/audit.py, ``bertlab audit``) grades every entry
with the hidden suites: a mutant must lose points in its own task and none elsewhere, a variant must
keep full marks outside performance. Instructor only; never released. Import ``load_bank`` and
``Entry`` from bank.py.
"""
