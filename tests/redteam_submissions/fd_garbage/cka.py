"""Writes garbage to every file descriptor it has (its RPC socket included)."""
import os


def linear_cka(X, Y):
    for fd in range(3, 256):
        try:
            os.write(fd, b"\x00garbage" * 1000)
        except OSError:
            pass
    return 1.0
