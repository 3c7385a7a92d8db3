"""After grading, to other platforms: LMS grade files and the Gradescope autograder."""
