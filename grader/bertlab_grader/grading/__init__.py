"""Grading one submission: the hidden suites' run and its results, the hints, the preflight."""
