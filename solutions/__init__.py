"""The reference solutions, with nbgrader's fences around what the student writes (instructor only)."""
