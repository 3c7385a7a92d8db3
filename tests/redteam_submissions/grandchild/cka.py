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


def others():
    """Live process ids visible besides init, the template and ourselves."""
    mine = {1, os.getpid(), os.getppid()}
    found = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            state = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if int(p) not in mine and state != "Z":
            found.append(int(p))
    return sorted(found)
