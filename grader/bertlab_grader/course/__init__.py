"""The nbgrader course: its configuration, gradebook, results.json, submissions, the worker pool and the cohort run."""
