"""A study on a real PostgreSQL server that goes away mid-study and comes back.

The test starts its own server (``initdb`` in a temporary directory, loopback, a free port; as
the ``postgres`` user when run as root, since PostgreSQL refuses root) and stops it itself.
``.ci/run`` installs Debian's ``postgresql`` package when the binaries are missing.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import yaml

from search.cli import main
from search.store.open import open_storage
from tests.unit.search import fakes

pytestmark = pytest.mark.postgres
ROOT = Path(__file__).resolve().parents[3]
WORKLOAD = {
    "requests": 20,
    "arrival": {"process": "poisson", "rate_rps": 10},
    "input_tokens": {"dist": "uniform", "low": 50, "high": 100},
    "output_tokens": {"dist": "uniform", "low": 10, "high": 20},
    "seed": 0,
}


def _pg_bin() -> Path | None:
    """The directory with ``initdb`` and ``pg_ctl``: on PATH, or Debian's versioned one."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=_version)
    return Path(versions[-1]).parent if versions else None


def _version(path: str) -> int:
    part = Path(path).parts[-3]
    return int(part) if part.isdigit() else 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A throwaway PostgreSQL cluster on 127.0.0.1."""

    def __init__(self, bindir: Path, root: Path) -> None:
        self.bindir, self.root = bindir, root
        self.data, self.log = root / "data", root / "server.log"
        self.port = _free_port()
        self.url = f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/dynosim"

    def _run(self, *cmd: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *cmd], check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
                  "--auth=trust", "-E", "UTF8", "--no-sync")  # fmt: skip

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                  "-o", opts, "-w", "-t", "30", "start")  # fmt: skip

    def kill(self) -> None:
        """Stop at once, as a crash would (no shutdown checkpoint, connections cut)."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def create_db(self) -> None:
        import psycopg2  # type: ignore[import-untyped,unused-ignore]

        con = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        con.autocommit = True
        con.cursor().execute("CREATE DATABASE dynosim")
        con.close()

    def complete(self) -> int:
        """COMPLETE trials, counted in SQL (no Optuna engine per poll)."""
        import psycopg2  # type: ignore[import-untyped,unused-ignore]

        con = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="dynosim")
        try:
            cur = con.cursor()
            cur.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'")
            row = cur.fetchone()
        except psycopg2.Error:  # tables not created yet
            return 0
        finally:
            con.close()
        return int(row[0]) if row else 0


@pytest.fixture
def server() -> Iterator[Server]:
    pytest.importorskip("psycopg2", reason="psycopg2-binary is in the dev extras")
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found (apt-get install postgresql)")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: cannot start PostgreSQL as another user")
    root = Path(tempfile.mkdtemp(prefix="dynosim-pg-"))
    if os.geteuid() == 0:
        try:
            shutil.chown(root, "postgres", "postgres")
        except (LookupError, PermissionError):
            shutil.rmtree(root)
            pytest.skip("running as root and there is no postgres user to run the server")
    root.chmod(0o755)
    srv = Server(bindir, root)
    try:
        srv.init()
        srv.start()
        srv.create_db()
        yield srv
    finally:
        if srv.running():
            subprocess.run(
                ["runuser", "-u", "postgres", "--"] * (os.geteuid() == 0)
                + [str(bindir / "pg_ctl"), "-D", str(srv.data), "-m", "immediate", "stop"],
                check=False,
                capture_output=True,
            )
        shutil.rmtree(root, ignore_errors=True)


def test_postgres_outage_stops_the_driver_and_the_study_resumes(
    tmp_path: Path, server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(WORKLOAD))
    data = fakes.study_dict(
        tmp_path,
        workload={"file": "w.yaml"},
        optimizer={"name": "random"},
        budget={"max_trials": 16},
        storage=server.url,
    )
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {**os.environ, "FAKE_SIM_SLEEP": "0.1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "search.cli", "tune", str(study), "--no-progress"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and server.complete() < 4:
            time.sleep(0.1)
        seen = server.complete()
        server.kill()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert seen >= 4
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # one line, no traceback
    assert "stopped answering" in lines[0]
    assert f"dynosim resume t --storage {server.url}" in lines[0]

    server.start()
    kept = optuna.load_study(study_name="t", storage=open_storage(server.url)).trials
    done = {t.number: (t.params, t.values) for t in kept if t.state.name == "COMPLETE"}
    assert len(done) >= seen  # nothing completed was lost
    assert main(["resume", "t", "--storage", server.url, "--no-progress"]) == 0
    assert "study t: budget; " in capsys.readouterr().out
    trials = optuna.load_study(study_name="t", storage=open_storage(server.url)).trials
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) == 16
    assert len({t.user_attrs["config_hash"] for t in complete}) == 16
    assert not [t for t in trials if t.state.name == "RUNNING"]
    assert {t.number: (t.params, t.values) for t in trials if t.number in done} == done
