"""How long `bertlab check --watch` takes from a save to its report: the figures of docs/student-guide.md.

    python benchmarks/check_watch_timing.py [--saves 20] [--idle 10]

Runs a real watcher (``python -m bertlab.cli check --watch``, output piped, so plain text) in a fresh
temporary workspace whose exercises/ holds the reference solutions (correct student code), and times
it from outside, as a student would see it. Every line of its output is timestamped as it arrives.

- **cold**: from starting the watcher to "Ready" (the one-off loading) and to the end of its first
  report (all four tasks), and the same first report from a plain `bertlab check` for comparison.
- **save to report**: ``--saves`` times for each file, then for all four files at once: write the file
  (its content changed: a counter in a comment), take the time, and wait for the report's last line
  (the verdict). The median and the slowest are printed, with the median time the check itself took
  (the report's own figure) and the median time from the write to the watcher's line saying it noticed.
- **noticing a save**: the watcher's poll (bertlab.check.watch.ExerciseFiles) against watchfiles
  (inotify), when watchfiles is installed: seconds from a write to each one saying so, ``--saves`` writes.
- **idle**: CPU seconds the watcher used while nothing changed for ``--idle`` seconds.

Prints a table, then a JSON line with every figure. Never asserts a time. Run it on a quiet machine:
the figures are wall-clock seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bertlab_grader.core.locations import REFERENCE_DIR

FILES = ("cka.py", "pooling.py", "siamese.py", "retrieval.py")
VERDICT = r"^\((all selected tasks pass|not everything passes yet); (\d+\.\d) s\)$"


class Watcher:
    """A watcher whose output lines are timestamped (time.monotonic) as they arrive."""

    def __init__(self, workspace: Path):
        env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "BERTLAB_CHECK_TIMEOUT")}
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "bertlab.cli", "check", "--watch"], cwd=workspace,
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines: list[tuple[float, str]] = []
        self.mark = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait_for(self, pattern: str, timeout: float = 300) -> tuple[float, re.Match]:
        """(arrival time, match) of the next line after the mark matching ``pattern``; moves the mark."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for index in range(self.mark, len(self.lines)):
                    found = re.search(pattern, self.lines[index][1])
                    if found:
                        self.mark = index + 1
                        return self.lines[index][0], found
            if self.proc.poll() is not None:
                break
            time.sleep(0.005)
        raise RuntimeError(f"no line matching {pattern!r}; output:\n" + "\n".join(l for _, l in self.lines[-40:]))

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        os.killpg(self.proc.pid, 2)
        self.proc.wait(30)


def write_changed(path: Path, original: str, counter: int) -> None:
    path.write_text(original + f"\n# benchmark save {counter}\n")


def save_to_report(watcher: Watcher, folder: Path, names: tuple[str, ...], saves: int, originals: dict,
                   counter: list[int]) -> dict:
    totals, checks, noticed, tasks = [], [], [], ""
    for _ in range(saves):
        counter[0] += 1
        for name in names:
            write_changed(folder / name, originals[name], counter[0])
        written = time.monotonic()
        seen, header = watcher.wait_for(r"saved: checking (.+) ---$")
        done, verdict = watcher.wait_for(VERDICT)
        watcher.wait_for(r"^Watching exercises/")
        totals.append(done - written)
        noticed.append(seen - written)
        checks.append(float(verdict.group(2)))
        tasks = header.group(1)
        if verdict.group(1) != "all selected tasks pass":
            raise RuntimeError(f"the reference did not pass after saving {names}")
    return {"tasks": tasks, "median_s": statistics.median(totals), "max_s": max(totals),
            "check_median_s": statistics.median(checks), "noticed_median_s": statistics.median(noticed),
            "saves": saves}


def noticing(folder: Path, saves: int) -> dict:
    """Seconds from a write to the poll, and to watchfiles, saying so."""
    from bertlab.check.watch import ExerciseFiles

    target = folder / "cka.py"
    original = target.read_text()
    out = {}
    files = ExerciseFiles(folder)
    delays = []
    for i in range(saves):
        time.sleep(0.2)
        write_changed(target, original, 10_000 + i)
        written = time.monotonic()
        files.wait()
        delays.append(time.monotonic() - written)
    out["poll"] = {"median_s": statistics.median(delays), "max_s": max(delays)}
    try:
        import watchfiles
    except ImportError:
        return out
    stop = threading.Event()
    seen: list[float] = []

    def watch() -> None:
        for _ in watchfiles.watch(folder, stop_event=stop, rust_timeout=100, yield_on_timeout=False):
            seen.append(time.monotonic())

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    time.sleep(1.0)  # let it start watching
    delays = []
    for i in range(saves):
        before = len(seen)
        write_changed(target, original, 20_000 + i)
        written = time.monotonic()
        while len(seen) == before and time.monotonic() - written < 10:
            time.sleep(0.002)
        delays.append(seen[-1] - written if len(seen) > before else float("nan"))
        time.sleep(0.2)
    stop.set()
    thread.join(5)
    out[f"watchfiles {watchfiles.__version__}"] = {"median_s": statistics.median(delays), "max_s": max(delays)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--saves", type=int, default=20, help="saves per row (default 20)")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle watching to measure (default 10)")
    args = parser.parse_args()
    figures: dict = {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="bertlab-watch-bench-") as tmp:
        workspace = Path(tmp)
        folder = workspace / "exercises"
        folder.mkdir()
        for name in FILES:
            shutil.copy(REFERENCE_DIR / name, folder / name)
        originals = {name: (folder / name).read_text() for name in FILES}

        started = time.monotonic()
        plain = subprocess.run([sys.executable, "-m", "bertlab.cli", "check"], cwd=workspace, capture_output=True,
                               text=True)
        figures["plain_check_all_s"] = time.monotonic() - started
        match = re.search(VERDICT, plain.stdout, re.M)
        figures["plain_check_all_reported_s"] = float(match.group(2)) if match else None

        watcher = Watcher(workspace)
        try:
            ready, found = watcher.wait_for(r"^Ready in (\d+\.\d) s")
            first, verdict = watcher.wait_for(VERDICT)
            watcher.wait_for(r"^Watching exercises/")
            figures["cold_ready_s"] = ready - watcher.started
            figures["cold_first_report_s"] = first - watcher.started
            figures["cold_first_check_s"] = float(verdict.group(2))
            counter = [0]
            rows = {}
            for name in FILES:
                rows[name] = save_to_report(watcher, folder, (name,), args.saves, originals, counter)
            rows["all four"] = save_to_report(watcher, folder, FILES, args.saves, originals, counter)
            figures["save_to_report"] = rows
            cpu_before = watcher.cpu_seconds()
            time.sleep(args.idle)
            figures["idle_cpu_s"] = watcher.cpu_seconds() - cpu_before
            figures["idle_s"] = args.idle
        finally:
            watcher.stop()
        figures["noticing"] = noticing(folder, args.saves)
    figures["loadavg_end"] = os.getloadavg()[0]

    print(f"bertlab check --watch on the reference solutions; {figures['cpus']} CPUs, load average "
          f"{figures['loadavg_start']:.2f} at the start, {figures['loadavg_end']:.2f} at the end")
    print()
    print("| what | tasks checked | median | slowest | the check itself (median) | noticed after (median) |")
    print("| --- | --- | --- | --- | --- | --- |")
    print(f"| plain `bertlab check`, all four (for comparison) | all four | {figures['plain_check_all_s']:.2f} s | | "
          f"{figures['plain_check_all_reported_s']} s | |")
    print(f"| cold start: watcher started -> ready | | {figures['cold_ready_s']:.2f} s | | | |")
    print(f"| cold start: watcher started -> first report | all four | {figures['cold_first_report_s']:.2f} s | | "
          f"{figures['cold_first_check_s']:.1f} s | |")
    for name, row in figures["save_to_report"].items():
        print(f"| save of {name} -> report ({row['saves']} saves) | {row['tasks']} | {row['median_s']:.2f} s | "
              f"{row['max_s']:.2f} s | {row['check_median_s']:.2f} s | {row['noticed_median_s']:.3f} s |")
    print()
    print(f"Idle: {figures['idle_cpu_s']:.2f} CPU s in {figures['idle_s']:.0f} s of watching.")
    print("Noticing a save (write -> the watcher knows):",
          "; ".join(f"{how}: median {row['median_s'] * 1000:.0f} ms, slowest {row['max_s'] * 1000:.0f} ms"
                    for how, row in figures["noticing"].items()))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
