"""A real PostgreSQL server on loopback for the instance-storage tests (never a mock).

``postgres_server()`` runs ``initdb`` into a fresh folder and ``pg_ctl start`` on 127.0.0.1 at a free port (trust
authentication, loopback only, its socket in that folder), yields its address, then stops it and removes the
folder. The server binaries come from the Debian ``postgresql`` package (``.ci/run`` installs it) or any
``initdb`` on ``PATH``. ``initdb`` refuses to run as root: as root the server runs as the ``postgres`` user.

Without the binaries the tests are skipped with the reason, except under CI (``CI`` set to true), where the
server is part of the set-up and its absence fails the tests.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._server import free_port

SUPERUSER = "noisycal"


def _bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    return Path(candidates[0]).parent if candidates else None


def require_postgres() -> Path:
    """The folder of ``initdb``/``pg_ctl``; skips the test without them (fails it under CI)."""
    bin_dir = _bin_dir()
    if bin_dir is None or not (bin_dir / "pg_ctl").exists():
        reason = ("no PostgreSQL server binaries (initdb, pg_ctl): install the Debian `postgresql` package "
                  "(.ci/run does) to run the PostgreSQL instance-storage tests")
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI: {reason}")
        pytest.skip(reason)
    return bin_dir


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str

    def url(self, db: str) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{db}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` (fresh per test); its URL."""
        import psycopg2

        con = psycopg2.connect(host=self.host, port=self.port, user=self.user, dbname="postgres")
        con.autocommit = True
        try:
            with con.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            con.close()
        return self.url(name)


def _as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    runuser = shutil.which("runuser")
    return [runuser, "-u", "postgres", "--", *cmd] if runuser else ["su", "postgres", "-c", " ".join(cmd)]


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    bin_dir = require_postgres()
    root = Path(tempfile.mkdtemp(prefix="noisycal-pg-"))
    data = root / "data"
    port = free_port()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}

    def run(cmd: list[str]) -> None:
        proc = subprocess.run(_as_server_user(cmd), capture_output=True, text=True, env=env, timeout=120, cwd=root)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stdout}{proc.stderr}")

    try:
        run([str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-sync"])
        opts = f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off -c max_connections=200"
        run([str(bin_dir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "server.log"), "-w", "-t", "60",
             "start"])
        try:
            yield PostgresServer("127.0.0.1", port, SUPERUSER)
        finally:
            run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"])
    finally:
        shutil.rmtree(root, ignore_errors=True)
