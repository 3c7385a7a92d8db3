"""A throwaway PostgreSQL server for a gradebook: the kit's tests (test_course.py) and the cluster
benchmark's recording figures (benchmarks/cluster_scale.py).

The server runs as an unprivileged user (PostgreSQL refuses root) on a Unix socket in a temporary
folder, so nothing on the machine is touched.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional


class PostgresMissing(RuntimeError):
    """Debian's postgresql package is not installed."""


def postgres_bin() -> Optional[Path]:
    """Directory of PostgreSQL's server binaries (Debian's postgresql package), if installed."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


@contextlib.contextmanager
def throwaway_postgres(port: int = 5499) -> Iterator[str]:
    """Start a server, yield its SQLAlchemy URL, stop it and remove its files."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        raise PostgresMissing("PostgreSQL server binaries not found: apt-get install postgresql (CI does), "
                              "or set BERTLAB_TEST_DB_URL to an existing database.")
    # Not pytest's tmp_path: those folders are private to root, and the server runs as nobody.
    root = Path(tempfile.mkdtemp(prefix="bertlab-pg-"))
    data, sock = root / "pgdata", root / "pgsock"
    sock.mkdir()
    as_user = []
    if os.geteuid() == 0:
        as_user = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
        for path in (root, sock):
            shutil.chown(path, 65534, 65534)
    subprocess.run(as_user + [str(bin_dir / "initdb"), "-D", str(data), "-U", "bertlab", "--auth=trust"],
                   check=True, capture_output=True)
    server = subprocess.Popen(as_user + [str(bin_dir / "postgres"), "-D", str(data), "-k", str(sock),
                                         "-c", "listen_addresses=", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"postgresql+psycopg2://bertlab@/postgres?host={sock}&port={port}"
        import sqlalchemy

        for _ in range(100):  # wait for the server to accept connections
            try:
                sqlalchemy.create_engine(url).connect().close()
                break
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.1)
        yield url
    finally:
        server.send_signal(signal.SIGINT)  # "fast" shutdown: pooled client connections do not hold it up
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(root, ignore_errors=True)
