"""What a submission's process printed: kept within a head and a tail, for the grader's messages.
"""

from __future__ import annotations

import os
import select
import threading



OUTPUT_HEAD = 16 * 1024
OUTPUT_TAIL = 4 * 1024


class Output:
    """The submission's stdout/stderr: the first OUTPUT_HEAD and last OUTPUT_TAIL bytes are kept."""

    def __init__(self):
        self.lock = threading.Lock()
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0
        self.pipes: list[int] = []

    def add(self, data: bytes) -> None:
        room = OUTPUT_HEAD - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > OUTPUT_TAIL:
                self.dropped += len(self.tail) - OUTPUT_TAIL
                del self.tail[:len(self.tail) - OUTPUT_TAIL]

    def attach(self, fd: int) -> None:
        os.set_blocking(fd, False)
        with self.lock:
            self.pipes.append(fd)
        threading.Thread(target=self._pump, args=(fd,), daemon=True, name="sandbox-output").start()

    def _read(self, fd: int) -> bool:
        """Read what is there now (caller holds the lock); False at end of file."""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return False
            self.add(chunk)

    def _pump(self, fd: int) -> None:
        # Drain continuously: a submission that floods stdout must not block on a full pipe.
        while True:
            with self.lock:
                if fd not in self.pipes:
                    return
            try:
                select.select([fd], [], [], 0.2)
            except (OSError, ValueError):
                return
            with self.lock:
                if fd not in self.pipes:
                    return
                if not self._read(fd):
                    self.pipes.remove(fd)
                    os.close(fd)
                    return

    def text(self) -> str:
        with self.lock:
            for fd in list(self.pipes):
                self._read(fd)
            text = self.head.decode("utf-8", "replace")
            if self.dropped:
                text += f"\n[... {self.dropped} bytes of output omitted ...]\n"
            return text + self.tail.decode("utf-8", "replace")

    def close(self) -> None:
        with self.lock:
            for fd in self.pipes:
                self._read(fd)
                os.close(fd)
            self.pipes.clear()


# ============================================================================= the sandbox

