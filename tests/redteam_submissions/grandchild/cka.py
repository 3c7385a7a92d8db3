"""Leaves a detached grandchild behind that would spy on the next submission."""
import os
import time


def linear_cka(X, Y):
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            while True:
                time.sleep(0.1)
        os._exit(0)
    os.waitpid(pid, 0)  # the classic double fork: the grandchild is now an orphan
    return 1.0


PF_EXITING = 0x4  # the kernel's flag for a process inside exit(): it runs no code of its own again


def others():
    """Process ids visible besides init, the template and ourselves that can still run code: not a
    zombie, and not a killed process still inside exit() (the kernel frees a large one's memory for
    milliseconds, longer on a loaded machine; it can spy on no one meanwhile)."""
    mine = {1, os.getpid(), os.getppid()}
    found = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, flags = fields[0], int(fields[6])
        if int(p) not in mine and state != "Z" and not flags & PF_EXITING:
            found.append(int(p))
    return sorted(found)
