"""A head started as Ray starts it (token authentication on) takes a study with no extra setting.

One ``ray start --head`` on loopback with ``RAY_AUTH_MODE`` unset and a token on the machine
(``ray get-auth-token --generate`` in a private ``HOME``): Ray 2.60 then turns token
authentication on for the head. ``dynosim tune --ray-address`` must

- with a wrong token (``RAY_AUTH_TOKEN``), fail in a few seconds with one line that names the
  fix, and leave no study behind (the same ``--name`` is accepted next);
- with the machine's token and no ``RAY_*`` variable at all, run the study to the end.

Every process of the head is killed in ``finally`` (found by a marker in its environment).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from search.store.open import open_storage
from tests.integration.search.test_ray_cluster import (
    MARKER,
    RAY,
    ROOT,
    WORKLOAD,
    cluster_dir,  # noqa: F401 - the fixture
    free_port,
)
from tests.unit.search import fakes

pytestmark = pytest.mark.ray

TRIALS = 4


def machine_env(tmp: Path) -> dict[str, str]:
    """A user's environment: no ``RAY_*`` setting, a home of its own, a marker for cleanup."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        {
            "HOME": str(tmp / "home"),
            MARKER: str(tmp),
            "PYTHONPATH": str(ROOT),
        }
    )
    return env


def tune(env: dict[str, str], study: Path, address: str) -> tuple[int, str, str, float]:
    cmd = [sys.executable, "-m", "search.cli", "tune", str(study), "--ray-address", address,
           "--no-progress"]  # fmt: skip
    t0 = time.monotonic()
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - t0


def test_token_auth_head_takes_the_study_and_a_wrong_token_is_one_line(
    cluster_dir: Path,  # noqa: F811
) -> None:
    tmp = cluster_dir
    env = machine_env(tmp)
    (tmp / "home").mkdir()
    gen = subprocess.run([RAY, "get-auth-token", "--generate"], env=env, capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert gen.returncode == 0, gen.stderr[-2000:]
    assert (tmp / "home" / ".ray" / "auth_token").exists()
    port = free_port()
    head = subprocess.Popen(
        [RAY, "start", "--head", "--port", str(port), "--node-ip-address", "127.0.0.1",
         "--num-cpus", "1", "--temp-dir", str(tmp / "ray"), "--disable-usage-stats",
         "--include-dashboard", "false", "--include-log-monitor", "false",
         "--dashboard-agent-listen-port", str(free_port())],
        env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    out, _ = head.communicate(timeout=60)
    assert head.returncode == 0, out.decode(errors="replace")[-2000:]

    (tmp / "workload.yaml").write_text(yaml.safe_dump(WORKLOAD))
    storage = str(tmp / "s.journal")
    study = fakes.study_dict(
        tmp,
        workload={"file": "workload.yaml"},
        optimizer={"name": "grid"},
        budget={"max_trials": TRIALS, "tol": 0.0, "patience": 100},
        executor={"kind": "ray"},
        storage=storage,
    )
    (tmp / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    address = f"127.0.0.1:{port}"

    rc, _, err, took_s = tune(env | {"RAY_AUTH_TOKEN": "not-the-token"}, tmp / "study.yaml",
                              address)  # fmt: skip
    assert rc == 2, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err[-2000:]
    assert "refused" in lines[0], lines[0]
    assert "ray get-auth-token" in lines[0], lines[0]
    assert took_s < 15, took_s  # Ray's own retries take ~20 s before a vague error
    assert "t" not in optuna.get_all_study_names(open_storage(storage))  # nothing left behind

    rc, out_text, err, _ = tune(env, tmp / "study.yaml", address)  # the same name again
    assert rc == 0, (out_text + err)[-2000:]
    assert "InvalidAuthToken" not in err
    trials = optuna.load_study(study_name="t", storage=open_storage(storage)).trials
    assert len(trials) == TRIALS
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
