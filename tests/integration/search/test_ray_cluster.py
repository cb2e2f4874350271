"""A real two-node Ray cluster on loopback: a study uses both nodes and survives losing one.

Two ``ray start`` processes (a head and a second node, one CPU each, each in its own session
so that it can be killed alone) form a private cluster in a temporary directory, without
token authentication (``RAY_AUTH_MODE=disabled``: loopback only, and the test's own). The
study runs through ``dynosim tune --ray-address``; its simulator notes the node of every
call. When both nodes have run tasks, the second node is killed with all its processes;
every trial must still be COMPLETE, none twice, and the study must end on the head. Every
process the cluster started is killed in ``finally`` (found by a marker in its environment,
so nothing outside the test is touched).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
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

from search.store.open import open_storage
from tests.unit.search import fakes

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[3]
RAY = str(Path(sys.executable).with_name("ray"))
MARKER = "DYNOSIM_TEST_CLUSTER"
TRIALS = 10
WORKLOAD = {
    "requests": 20,
    "arrival": {"process": "poisson", "rate_rps": 20},
    "input_tokens": {"dist": "uniform", "low": 100, "high": 400},
    "output_tokens": {"dist": "uniform", "low": 10, "high": 40},
    "seed": 0,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_env(tmp: Path, node_log: Path) -> dict[str, str]:
    """The environment of every cluster process and of the driver."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        {
            MARKER: str(tmp),  # inherited by every daemon and worker: how cleanup finds them
            "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0",
            # a dead node is noticed in ~2 s rather than ~30 s
            "RAY_health_check_initial_delay_ms": "1000",
            "RAY_health_check_period_ms": "500",
            "RAY_health_check_timeout_ms": "500",
            "RAY_health_check_failure_threshold": "3",
            "PYTHONPATH": str(ROOT),  # workers import search/, dynosim/ and tests/
            "FAULTY_NODE_LOG": str(node_log),
            "FAULTY_SLEEP_S": "1.0",
        }
    )
    return env


def ray_start(env: dict[str, str], tmp: Path, *args: str) -> int:
    """``ray start`` in a new session; returns the session's process group."""
    cmd = [
        RAY, "start", "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
        "--temp-dir", str(tmp / "ray"), "--disable-usage-stats",
        "--dashboard-agent-listen-port", str(free_port()), "--include-log-monitor", "false",
        *args,
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out.decode(errors="replace")[-2000:]
    return proc.pid  # the session leader's pid is the process group of its daemons


def procs() -> dict[int, tuple[int, int, str]]:
    """``pid -> (ppid, pgid, environ)`` of this user's processes (Linux ``/proc``)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if stat[0] != "Z":
            out[int(entry.name)] = (int(stat[1]), int(stat[2]), environ)
    return out


def kill_node(pgid: int) -> None:
    """SIGKILL a node: its session's processes and all their descendants (workers)."""
    table = procs()
    doomed = {pid for pid, (_, g, _) in table.items() if g == pgid}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _, _) in table.items() if ppid in doomed} - doomed
        doomed |= more
        grew = bool(more)
    sigkill(doomed)


def kill_cluster(tmp: Path) -> None:
    """SIGKILL every process that carries this cluster's marker."""
    tag = f"{MARKER}={tmp}\0"
    sigkill({pid for pid, (_, _, env) in procs().items() if tag in env and pid != os.getpid()})


def sigkill(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def node_id(pgid: int) -> str:
    """The Ray node id of the raylet in process group ``pgid``."""
    for pid, (_, g, _) in procs().items():
        if g != pgid:
            continue
        try:
            args = (Path(f"/proc/{pid}/cmdline").read_bytes()).split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"/raylet"):
            for a in args:
                if a.startswith(b"--node_id="):
                    return a.split(b"=", 1)[1].decode()
    raise AssertionError(f"no raylet in process group {pgid}")


def nodes_seen(node_log: Path) -> list[str]:
    if not node_log.exists():
        return []
    return [line.split()[0] for line in node_log.read_text().splitlines() if line.strip()]


@pytest.fixture
def cluster_dir() -> Iterator[Path]:
    # Ray's socket paths must stay short: not under pytest's deep tmp_path.
    tmp = Path(tempfile.mkdtemp(prefix="dyray", dir="/tmp"))
    try:
        yield tmp
    finally:
        kill_cluster(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


def test_study_uses_both_nodes_and_survives_losing_one(cluster_dir: Path) -> None:
    tmp = cluster_dir
    node_log = tmp / "nodes.log"
    env = cluster_env(tmp, node_log)
    port = free_port()
    t0 = time.monotonic()
    head = ray_start(env, tmp, "--head", "--port", str(port), "--include-dashboard", "false")
    second = ray_start(env, tmp, "--address", f"127.0.0.1:{port}")
    head_id, second_id = node_id(head), node_id(second)
    started_s = time.monotonic() - t0

    (tmp / "workload.yaml").write_text(yaml.safe_dump(WORKLOAD))
    storage = str(tmp / "s.journal")
    study = fakes.study_dict(
        tmp,
        workload={"file": "workload.yaml"},
        simulator="tests.unit.search.faulty:on_node",
        optimizer={"name": "grid"},
        budget={"max_trials": TRIALS, "tol": 0.0, "patience": 100},
        executor={"kind": "ray", "max_retries": 3},
        storage=storage,
    )
    (tmp / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    cmd = [sys.executable, "-m", "search.cli", "tune", str(tmp / "study.yaml"),
           "--ray-address", f"127.0.0.1:{port}", "--no-progress"]  # fmt: skip
    driver = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 40
        while set(nodes_seen(node_log)) != {head_id, second_id}:  # both nodes have run tasks
            assert driver.poll() is None, driver.communicate()[0][-2000:]
            assert time.monotonic() < deadline, f"tasks ran only on {set(nodes_seen(node_log))}"
            time.sleep(0.1)
        calls_at_kill = len(nodes_seen(node_log))
        kill_node(second)
        killed_s = time.monotonic() - t0
        out, _ = driver.communicate(timeout=45)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    study_s = time.monotonic() - t0 - started_s
    assert driver.returncode == 0, out[-2000:]

    trials = optuna.load_study(study_name="t", storage=open_storage(storage)).trials
    assert len(trials) == TRIALS
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert len({t.user_attrs["config_hash"] for t in trials}) == TRIALS  # none twice
    reasons = [t.user_attrs["infeasible_reason"] or "" for t in trials]
    assert not any("lost" in r for r in reasons), reasons
    seen = nodes_seen(node_log)
    assert set(seen[calls_at_kill:]) <= {head_id}  # after the kill, only the head works
    assert len(seen) > calls_at_kill  # and the study went on there
    print(
        f"cluster up {started_s:.1f} s, second node killed at {killed_s:.1f} s, study "
        f"{study_s:.1f} s; {len(seen)} simulator calls for {TRIALS} trials "
        f"({seen.count(second_id)} on the second node)"
    )
