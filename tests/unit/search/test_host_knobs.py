"""Host-process knobs in a study, and their launch flags in an export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError, DynosimError
from search.export import TrialInfo, export_trial
from search.study.dry_run import check_runnable
from search.study.study_file import parse_study
from tests.unit.search import fakes

SPACE: dict[str, Any] = {
    "knobs": {
        "backend": {"type": "choice", "values": ["vllm", "sglang"]},
        "host.api_server_count": {"type": "int", "low": 1, "high": 8, "when": {"backend": "vllm"}},
        "host.tokenizer_workers": {"type": "choice", "values": [1, 2, 4],
                                   "when": {"backend": "sglang"}},
        "engine.max_num_seqs": {"type": "choice", "values": [64, 256]},
    }
}  # fmt: skip


def _study(tmp_path: Path, **fields: Any) -> Any:
    data = fakes.study_dict(tmp_path, space=SPACE, **fields)
    return parse_study(data, base_dir=tmp_path)


def test_host_knobs_build_configs_per_backend(tmp_path: Path) -> None:
    deployment = {"host": {"request_us": 1200.0, "input_token_us": 1.1}}
    sf = _study(tmp_path, deployment=deployment)
    problem = sf.problem
    check_runnable(problem, catalog=False)
    vllm = problem.to_config(
        {"backend": "vllm", "host.api_server_count": 4, "engine.max_num_seqs": 64}
    )
    assert vllm.host is not None
    assert (vllm.host.api_server_count, vllm.host.request_us) == (4, 1200.0)
    sgl = problem.to_config(
        {"backend": "sglang", "host.tokenizer_workers": 2, "engine.max_num_seqs": 64}
    )
    assert sgl.host is not None
    assert (sgl.host.tokenizer_workers, sgl.host.api_server_count) == (2, None)


def test_a_backend_mismatched_host_knob_is_refused(tmp_path: Path) -> None:
    space = {"knobs": {"host.api_server_count": {"type": "choice", "values": [1, 2]}}}
    data = fakes.study_dict(tmp_path, space=space, deployment={"backend": "sglang"})
    with pytest.raises(DynosimError, match=r"host\.api_server_count.*unset with backend sglang"):
        parse_study(data, base_dir=tmp_path)


def test_a_misspelt_host_knob_is_refused(tmp_path: Path) -> None:
    space = {"knobs": {"host.api_servers": {"type": "choice", "values": [1, 2]}}}
    with pytest.raises(ConfigError, match=r"host\.api_server_count"):
        parse_study(fakes.study_dict(tmp_path, space=space), base_dir=tmp_path)


def _export(**fields: Any) -> Any:
    cfg = DeploymentConfig.from_dict(
        {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200_sxm", **fields}
    )
    info = TrialInfo(study_name="demo", number=1, feasible=True, reason=None, metrics={})
    return export_trial(cfg.to_dict(), {}, info)


def test_export_writes_the_host_process_flags() -> None:
    ex = _export(workers=2, host={"api_server_count": 4, "request_us": 1200.0})
    for cmd in ex.engine.commands:
        i = cmd.argv.index("--api-server-count")
        assert cmd.argv[i + 1] == "4"
    assert any("request_us" in n for n in ex.engine.notes)
    assert ex.router is not None
    for cmd in ex.router.commands:  # Dynamo's frontend does the HTTP side there
        assert "--api-server-count" not in cmd.argv
    sgl = _export(backend="sglang", host={"tokenizer_workers": 2})
    argv = sgl.engine.commands[0].argv
    assert argv[argv.index("--tokenizer-worker-num") + 1] == "2"
    trt = _export(backend="trtllm", host={"postprocess_workers": 2})
    argv = trt.engine.commands[0].argv
    assert argv[argv.index("--num_postprocess_workers") + 1] == "2"
    plain = _export()
    assert "--api-server-count" not in plain.engine.commands[0].argv
    assert not any("request_us" in n for n in plain.engine.notes)
