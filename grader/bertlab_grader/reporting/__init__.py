"""After grading, for the instructor: the cohort report and similar pairs."""
