"""A mutant-bank entry: trusted kit code, graded in process by `bertlab audit`."""
