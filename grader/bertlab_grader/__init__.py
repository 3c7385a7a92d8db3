"""Grading (instructor only): sandboxed cohort grading into an nbgrader course, hidden suites, audit."""
