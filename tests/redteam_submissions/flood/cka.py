"""Floods stdout and stderr (50 MB), then answers honestly."""
import os
import sys


def linear_cka(X, Y):
    line = "flood " * 1000 + "\n"
    for _ in range(5000):
        sys.stdout.write(line)
    os.write(2, b"raw" * 1_000_000)
    print("LAST LINE OF THE FLOOD")
    return 0.25
