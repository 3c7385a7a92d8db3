"""Ends its process from inside calls, three ways."""
import os
import signal
import sys


def linear_cka(X, Y):
    os._exit(0)


def cka_matrix(reps):
    sys.exit(0)


def segfault():
    os.kill(os.getpid(), signal.SIGSEGV)
