"""Hidden suites with points (instructor only; never in the student bundle).

A package, like tests/public, so that its module names (``hidden.test_hidden_cka``) never clash with
the public suite's, and so that its data module (``hidden.reference_data``) stays imported between
the many in-process pytest runs of one cohort grader: heavy reference data is computed once.
See docs/hidden-suites.md for the points, the bands and how the suites are audited.
"""
