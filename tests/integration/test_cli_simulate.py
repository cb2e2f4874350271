"""``dynosim simulate`` end to end: tables, JSON, determinism across processes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from search.cli import main
from tests.conftest import TRACES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llama8b_h200_vllm.yaml"
CONVERSATION = TRACES / "mooncake" / "conversation_trace.jsonl"


def _deployment(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data.update(changes)
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _workload(tmp_path: Path) -> Path:
    path = tmp_path / "workload.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "requests": 300,
                "arrival": {"process": "poisson", "rate_rps": 20},
                "input_tokens": {"dist": "uniform", "low": 100, "high": 3000},
                "output_tokens": {"dist": "uniform", "low": 1, "high": 300},
                "prefix": {"groups": 4, "tokens": 1024},
                "seed": 3,
            }
        )
    )
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "search.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )


def test_same_seed_identical_metrics_in_fresh_processes(tmp_path: Path) -> None:
    dep = _deployment(tmp_path, router="random")
    wl = _workload(tmp_path)
    outs = []
    for i in range(2):
        out = tmp_path / f"m{i}.json"
        proc = _cli("simulate", str(dep), "--workload", str(wl), "--seed", "5", "--json", str(out))
        assert proc.returncode == 0, proc.stderr
        assert "time_to_first_token" in proc.stdout
        metrics = json.loads(out.read_text())["metrics"]
        del metrics["wall_s"], metrics["speedup"]
        outs.append(metrics)
    assert outs[0] == outs[1]
    assert outs[0]["completed_requests"] == 300


def test_trace_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not CONVERSATION.exists():
        pytest.skip(f"trace {CONVERSATION} not present")
    out = tmp_path / "m.json"
    code = main(
        [
            "simulate",
            str(EXAMPLE),
            "--trace",
            str(CONVERSATION),
            "--max-requests",
            "500",
            "--trace-speedup",
            "4",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    m = json.loads(out.read_text())["metrics"]
    assert m["completed_requests"] == 500
    assert m["simulated_duration_s"] < 200  # 500 requests span ~150 s, replayed 4x faster


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"router": "fastest"}, "router: got 'fastest'; allowed: round_robin | random"),
        ({"tp": 64}, "tp: got 64; allowed: a divisor of the 32 attention heads"),
        ({"model": "meta-llama/Meta-Llama-3.1-70B", "gpu": "l40s"}, "does not fit"),
        ({"engine": {"max_num_seqs": 0}}, "engine.max_num_seqs: got 0"),
        ({"colour": "blue"}, "colour: got 'blue'; allowed: one of"),
    ],
)
def test_bad_deployment_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, object], expected: str
) -> None:
    dep = _deployment(tmp_path, **changes)
    code = main(["simulate", str(dep), "--workload", str(_workload(tmp_path))])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_malformed_trace_line_is_reported_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
        '{"timestamp": 10, "input_length": 600, "output_length": "many", "hash_ids": [1, 2]}\n'
    )
    code = main(["simulate", str(EXAMPLE), "--trace", str(trace)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert f"{trace}:2:" in err
    assert len(err.splitlines()) == 1


def test_binary_yaml_and_unwritable_json_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    wl = _workload(tmp_path)
    cases = [
        (["simulate", str(binary), "--workload", str(wl)], "not UTF-8 text"),
        (["simulate", str(EXAMPLE), "--workload", str(binary)], "not UTF-8 text"),
        (["tune", str(binary)], "not UTF-8 text"),
        (["simulate", str(EXAMPLE), "--workload", str(wl), "--json", str(tmp_path)], "--json"),
    ]
    for argv, expected in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert expected in err
        assert len(err.splitlines()) == 1


def test_estimated_step_times_are_a_one_line_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """MiniMax-M2.5 at TP 8: block-FP8 experts AIConfigurator has no kernels for at that split."""
    dep = _deployment(
        tmp_path, model="MiniMaxAI/MiniMax-M2.5", tp=8, dtype="fp8", engine={"max_num_seqs": 16}
    )
    code = main(["simulate", str(dep), "--workload", str(_workload(tmp_path))])
    err = capsys.readouterr().err
    assert code == 0
    lines = [line for line in err.splitlines() if "warning" in line]
    assert len(lines) == 1
    assert lines[0].startswith("dynosim simulate: warning: MiniMaxAI/MiniMax-M2.5 on h200_sxm")
    assert "partly estimated" in lines[0]
    assert "per-tensor FP8" in lines[0]
    strict = _deployment(tmp_path, model="MiniMaxAI/MiniMax-M2.5", tp=8, dtype="fp8",
                         aic_database_mode="silicon")  # fmt: skip
    assert main(["simulate", str(strict), "--workload", str(_workload(tmp_path))]) == 2
    assert "weight_block_size" in capsys.readouterr().err
