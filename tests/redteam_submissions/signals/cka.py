"""Ignores every signal it may at import, then loops forever."""
import signal

for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU, signal.SIGUSR1, signal.SIGQUIT):
    signal.signal(sig, signal.SIG_IGN)


def linear_cka(X, Y):
    while True:
        pass
