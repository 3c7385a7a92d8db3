"""The few things every room of the grader shares: where the kit's files are, nbgrader's fences, the grader's own failures."""
