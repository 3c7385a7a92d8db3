"""Public tests, shipped to students.

A package (rather than loose files) so that its module names (``public.test_cka``) can never clash
with a hidden suite's files of the same base name when both are collected in one run.
"""
