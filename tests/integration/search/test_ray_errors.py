"""Ray connection errors are one line each, and fast: a bad address, nothing there, no cluster.

``resume`` re-uses the address stored with the study unless a flag replaces it; a stored
address that fails gives the same one line, and ``--executor local`` (or ``--ray-address
local``) gets the study going again.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import yaml

from search.cli import main
from search.store.open import open_storage, study_names
from tests.unit.search import fakes

pytestmark = pytest.mark.ray

WORKLOAD = {
    "requests": 20,
    "arrival": {"process": "poisson", "rate_rps": 20},
    "input_tokens": {"dist": "uniform", "low": 100, "high": 400},
    "output_tokens": {"dist": "uniform", "low": 10, "high": 40},
    "seed": 0,
}


def write_study(tmp_path: Path, **fields: object) -> Path:
    (tmp_path / "workload.yaml").write_text(yaml.safe_dump(WORKLOAD))
    data = fakes.study_dict(
        tmp_path,
        workload={"file": "workload.yaml"},
        budget={"max_trials": 3, "tol": 0.0, "patience": 100},
        **{"executor": {"kind": "ray"}, **fields},
    )
    f = tmp_path / "study.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    return f


def dead_address() -> str:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run the CLI; it must exit 2 with one line on stderr, and quickly."""
    t0 = time.monotonic()
    assert main(argv) == 2
    assert time.monotonic() - t0 < 10
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


@pytest.fixture(autouse=True)
def _no_ray_runtime() -> None:
    import ray

    assert not ray.is_initialized()  # a joined runtime would hide the address


def test_malformed_address_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write_study(tmp_path)
    err = one_line_error(capsys, ["tune", str(f), "--ray-address", "not_an_address"])
    assert "executor.address: got 'not_an_address'; allowed: auto | HOST:PORT" in err
    assert not (tmp_path / "s.journal").exists()  # refused before the study was created
    f = write_study(tmp_path, executor={"kind": "ray", "address": "host:notaport"})
    assert "executor.address: got 'host:notaport'" in one_line_error(capsys, ["tune", str(f)])


def test_address_where_nothing_listens_fails_fast(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    addr = dead_address()
    err = one_line_error(capsys, ["tune", str(write_study(tmp_path)), "--ray-address", addr])
    assert f"executor.address: got '{addr}'; allowed: a reachable Ray head node" in err
    assert "ray start --head" in err


def test_auto_without_a_cluster_says_how_to_start_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray._private import services

    # Hide any Ray runtime of this machine (other tests, other users) from `auto`.
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "no-ray"))
    monkeypatch.setattr(services, "_find_address_from_flag", lambda flag: set())
    services._cached_find_gcs_addresses.cache_clear()
    err = one_line_error(capsys, ["tune", str(write_study(tmp_path)), "--ray-address", "auto"])
    assert "executor.address: got 'auto'; allowed: a running Ray cluster (none found" in err
    assert "start one with `ray start --head`, or drop --ray-address" in err


def test_resume_with_a_stored_bad_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stored = dead_address()
    f = write_study(tmp_path, executor={"kind": "ray", "address": stored})
    storage = str(tmp_path / "s.journal")
    first = one_line_error(capsys, ["tune", str(f), "--no-progress"])
    assert f"got '{stored}'" in first
    # a study that never ran a trial is not left behind to refuse its name (issue 20)
    assert "t" not in study_names(open_storage(storage))
    assert main(["tune", str(f), "--executor", "local", "--n-trials", "1", "--no-progress"]) == 0
    assert "1 trials" in capsys.readouterr().out
    # resume re-uses the stored address: the same one line, not a hang or a traceback
    ray_again = ["resume", "t", "--storage", storage, "--executor", "ray", "--n-trials", "3"]
    again = one_line_error(capsys, ray_again)
    assert again == first.replace("dynosim tune", "dynosim resume")
    assert "t" in study_names(open_storage(storage))  # resume never drops a study
    # the flag wins over the stored address
    other = dead_address()
    flag = ["resume", "t", "--storage", storage, "--ray-address", other, "--n-trials", "3"]
    assert f"got '{other}'" in one_line_error(capsys, flag)
    # and a local executor finishes the study
    local = ["resume", "t", "--storage", storage, "--executor", "local", "--n-trials", "3"]
    assert main(local) == 0
    assert "3 trials" in capsys.readouterr().out
