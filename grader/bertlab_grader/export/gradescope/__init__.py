"""Gradescope: the archive ``bertlab gradescope`` builds (``archive``) and what runs inside Gradescope (``autograder``)."""
