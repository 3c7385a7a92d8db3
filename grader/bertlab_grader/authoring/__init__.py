"""Authoring the assignment: stubs from the solutions, the lesson notebook, the student bundle, the audit."""
