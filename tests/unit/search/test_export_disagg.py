"""Disaggregated and planner exports parse with parsers mirroring Dynamo 1.6.1's flags."""

from __future__ import annotations

import argparse
import json
import shlex
from typing import Any

import pytest
import yaml

from dynosim.config import DeploymentConfig
from search.export import Command, Export, TrialInfo, export_trial
from tests.unit.search.test_export import (
    MODEL,
    dynamo_trtllm_parser,
    frontend_parser,
    parse,
    sglang_parser,
    vllm_parser,
)

DISAGG: dict[str, Any] = {
    "model": MODEL,
    "gpu": "h200_sxm",
    "mode": "disagg",
    "engine": {"block_size": 32, "gpu_memory_utilization": 0.85},
    "prefill": {"tp": 2, "workers": 2, "engine": {"max_num_batched_tokens": 16384}},
    "decode": {"tp": 1, "workers": 3, "engine": {"max_num_seqs": 512}},
    "router": "kv_aware",
    "decode_router": "least_loaded",
}
DISAGG_MODES = ["agg", "pd", "prefill", "decode", "encode"]
"""``--disaggregation-mode`` of dynamo.vllm / dynamo.trtllm (ai-dynamo 1.6.1 backend_args.py)."""
PLANNER_FIELDS = {
    "backend", "mode", "optimization_target", "max_gpu_budget", "min_endpoint",
    "prefill_min_endpoint", "decode_min_endpoint", "prefill_engine_num_gpu",
    "decode_engine_num_gpu", "ttft_ms", "itl_ms", "load_predictor",
    "throughput_adjustment_interval_seconds", "load_adjustment_interval_seconds",
    "decode_scale_up_kv_rate", "decode_scale_down_kv_rate", "prefill_scale_up_queue_tokens",
    "prefill_scale_down_queue_tokens",
}  # fmt: skip
"""Fields of ai-dynamo 1.6.1 ``dynamo/planner/config/planner_config.py`` PlannerConfig used here."""


def config(backend: str = "vllm", **fields: Any) -> dict[str, Any]:
    return DeploymentConfig.from_dict({**DISAGG, "backend": backend, **fields}).to_dict()


def run(cfg: dict[str, Any], **kw: Any) -> Export:
    info = TrialInfo(study_name="demo", number=7, feasible=True)
    return export_trial(cfg, {}, info, **kw)


def dynamo_vllm_parser() -> argparse.ArgumentParser:
    p = vllm_parser(dynamo=True)
    p.add_argument("--disaggregation-mode", choices=DISAGG_MODES)
    p.add_argument("--kv-transfer-config", type=json.loads)
    return p


def dynamo_sglang_parser() -> argparse.ArgumentParser:
    """dynamo.sglang hands these to SGLang (sglang 0.5.23 arg_groups/fields/disagg.py)."""
    p = sglang_parser(dynamo=True)
    p.add_argument("--disaggregation-mode", choices=["null", "prefill", "decode"])
    backends = ["mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp"]
    p.add_argument("--disaggregation-transfer-backend", choices=backends)
    return p


def dynamo_trtllm_disagg_parser() -> argparse.ArgumentParser:
    p = dynamo_trtllm_parser()
    p.add_argument("--disaggregation-mode", choices=DISAGG_MODES)
    return p


def planner_config(cmd: Command) -> dict[str, Any]:
    """The JSON of ``python -m dynamo.planner --config JSON`` (its only flag in 1.6.1)."""
    p = argparse.ArgumentParser(prog="dynamo.planner", allow_abbrev=False)
    p.add_argument("--config", required=True, type=json.loads)
    words = shlex.split(cmd.text().replace("\\\n", " "))
    assert words[:3] == ["python", "-m", "dynamo.planner"]
    conf: dict[str, Any] = p.parse_args(words[3:]).config
    assert set(conf) <= PLANNER_FIELDS
    return conf


def devices(cmd: Command) -> list[int]:
    env = dict(cmd.env)
    return [int(i) for i in env["CUDA_VISIBLE_DEVICES"].split(",")]


def test_vllm_disagg_one_command_per_worker_with_its_pool_tp_and_role() -> None:
    ex = run(config("vllm"))
    assert ex.router is None
    assert [p.title for p in ex.pools] == [
        "prefill: 2 Dynamo vllm worker(s) x TP 2",
        "decode: 3 Dynamo vllm worker(s) x TP 1",
    ]
    prefill, decode = ex.pools
    assert len(prefill.commands) == 2
    assert len(decode.commands) == 3
    seen: list[int] = []
    for part, role, tp, kv_role in ((prefill, "prefill", 2, "kv_producer"),
                                    (decode, "decode", 1, "kv_consumer")):  # fmt: skip
        for cmd in part.commands:
            assert cmd.argv[:3] == ("python", "-m", "dynamo.vllm")
            a = parse(dynamo_vllm_parser(), cmd, 3)
            assert (a.model, a.disaggregation_mode, a.tensor_parallel_size) == (MODEL, role, tp)
            assert a.kv_transfer_config == {"kv_connector": "NixlConnector", "kv_role": kv_role}
            assert (a.block_size, a.gpu_memory_utilization) == (32, 0.85)  # the shared engine
            assert len(devices(cmd)) == tp
            seen += devices(cmd)
        if role == "prefill":
            assert a.max_num_batched_tokens == 16384
            assert a.max_num_seqs == 256
        else:
            assert (a.max_num_batched_tokens, a.max_num_seqs) == (8192, 512)
    assert seen == list(range(7))  # 2x2 + 3x1 GPUs, each used once, prefill first
    text = ex.to_text()
    assert "vllm serve" not in text  # no standalone servers: disaggregation needs Dynamo
    assert "prefill 2 x 2 + decode 3 x 1 h200_sxm (7 GPUs)" in text.splitlines()[1]


def test_sglang_disagg_uses_nixl_and_each_pool_tp() -> None:
    ex = run(config("sglang"))
    got = []
    for part in ex.pools:
        for cmd in part.commands:
            a = parse(dynamo_sglang_parser(), cmd, 3)
            assert a.disaggregation_transfer_backend == "nixl"
            assert a.model_path == MODEL
            got.append((a.disaggregation_mode, a.tp_size, a.max_running_requests))
    assert got == [("prefill", 2, 256)] * 2 + [("decode", 1, 512)] * 3
    assert any("bootstrap-port" in n for n in ex.pools[0].notes)


def test_trtllm_disagg_pools_get_their_own_yaml(tmp_path: Any) -> None:
    ex = run(config("trtllm"), yaml_dir=tmp_path)
    assert ex.trtllm_yaml is None
    paths = {p: str(tmp_path / f"trtllm-demo-trial7-{p}.yaml") for p in ("prefill", "decode")}
    assert [path for path, _ in ex.yaml_files()] == [paths["prefill"], paths["decode"]]
    for part, role in zip(ex.pools, ("prefill", "decode"), strict=True):
        for cmd in part.commands:
            a = parse(dynamo_trtllm_disagg_parser(), cmd, 3)
            assert a.disaggregation_mode == role
            assert a.extra_engine_args == paths[role]
            assert a.tensor_parallel_size == (2 if role == "prefill" else 1)
            assert a.publish_kv_events is (True if role == "prefill" else None)  # kv_aware router
    options = {path: yaml.safe_load(text) for path, text in ex.yaml_files()}
    for role in ("prefill", "decode"):
        opts = options[paths[role]]
        assert opts["cache_transceiver_config"] == {"backend": "DEFAULT"}
        assert opts["kv_cache_config"]["tokens_per_block"] == 32
        assert opts["kv_cache_config"]["free_gpu_memory_fraction"] == 0.85
    text = ex.to_text()
    assert f"# {paths['decode']}:" in text
    assert ex.to_dict()["pool_yamls"][0]["path"] == paths["prefill"]


@pytest.mark.parametrize(("router", "weight"), [("kv_aware", 1.5), ("kv_load", 0.0)])
def test_disagg_frontend_routes_to_the_prefill_pool(router: str, weight: float) -> None:
    ex = run(config(router=router, kv_router={"overlap_weight": 1.5, "temperature": 0.5},
                    prefill={"tp": 2, "workers": 2, "engine": {"block_size": 64}}))  # fmt: skip
    assert ex.engine.title == (
        "frontend: NVIDIA Dynamo (kv) in front of 2 prefill + 3 decode workers"
    )
    (cmd,) = ex.engine.commands
    a = parse(frontend_parser(), cmd, 3)
    assert (a.router_mode, a.router_kv_overlap_score_weight, a.router_temperature) == (
        "kv", weight, 0.5,
    )  # fmt: skip
    assert a.kv_cache_block_size == 64  # the prefill pool's, which the router sees
    assert any("block sizes differ (prefill 64, decode 32)" in n for n in ex.engine.notes)
    assert any("decode_router least_loaded" in n for n in ex.engine.notes)


def test_max_local_prefill_tokens_is_a_marked_note() -> None:
    ex = run(config(max_local_prefill_tokens=512))
    (note,) = [n for n in ex.engine.notes if n.startswith("max_local_prefill_tokens 512")]
    assert "--router-conditional-disagg" in note
    assert '"eff_isl_threshold": 512' in note
    assert "unverified" in note
    assert not any("--router-conditional-disagg" in c.line() for c in ex.engine.commands)


def test_pools_over_two_nodes_keep_tp_groups_inside_a_node() -> None:
    ex = run(config(prefill={"tp": 4, "workers": 3}, decode={"tp": 2, "workers": 3}))
    placed = [devices(c) for p in ex.pools for c in p.commands]
    assert placed == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3], [4, 5], [6, 7], [0, 1]]
    assert "#0 node 0, #1 node 0, #2 node 1" in ex.pools[0].notes[-1]
    assert "#0 node 1, #1 node 1, #2 node 2" in ex.pools[1].notes[-1]
    # 3 x TP2 leave GPUs 6-7 of node 0: a TP4 decode worker starts on node 1 instead
    ex = run(config(prefill={"tp": 2, "workers": 3}, decode={"tp": 4, "workers": 2}))
    placed = [devices(c) for p in ex.pools for c in p.commands]
    assert placed == [[0, 1], [2, 3], [4, 5], [0, 1, 2, 3], [4, 5, 6, 7]]
    assert ex.pools[1].notes[-1].endswith("#0 node 1, #1 node 1")


def test_disagg_load_planner_settings() -> None:
    planner = {"policy": "load", "adjustment_interval_s": 20.0, "kv_scale_up": 0.8,
               "kv_scale_down": 0.3, "max_workers": 4, "decode": {"min_workers": 2,
                                                                  "max_workers": 6}}  # fmt: skip
    ex = run(config("sglang", planner=planner, decode={"tp": 1, "workers": 3}))
    assert ex.planner is not None
    assert ex.planner.title == "planner: Dynamo planner (load, mode disagg)"
    conf = planner_config(ex.planner.commands[0])
    assert conf == {
        "backend": "sglang", "mode": "disagg", "max_gpu_budget": 2 * 4 + 1 * 6,
        "prefill_engine_num_gpu": 2, "decode_engine_num_gpu": 1,
        "prefill_min_endpoint": 1, "decode_min_endpoint": 2,
        "optimization_target": "load", "load_adjustment_interval_seconds": 20,
        "decode_scale_up_kv_rate": 80.0, "decode_scale_down_kv_rate": 30.0,
    }  # fmt: skip
    notes = " ".join(ex.planner.notes)
    assert "prefill_scale_up_queue_tokens" in notes  # required by Dynamo, not derivable
    assert "max_workers (prefill 4, decode 6)" in notes
    assert "# ---- planner: Dynamo planner" in ex.to_text()
    assert ex.to_dict()["planner"]["commands"][0]["argv"][3] == "--config"


def test_sla_planner_settings_and_capped_budget() -> None:
    planner = {"policy": "sla", "adjustment_interval_s": 12.5, "max_gpus": 10}
    ex = run(config("trtllm", planner=planner, slo={"ttft_ms": 800, "itl_ms": 25}))
    assert ex.planner is not None
    conf = planner_config(ex.planner.commands[0])
    assert conf["optimization_target"] == "sla"
    assert conf["load_predictor"] == "constant"
    assert conf["throughput_adjustment_interval_seconds"] == 12
    assert (conf["ttft_ms"], conf["itl_ms"]) == (800, 25)
    assert conf["max_gpu_budget"] == 10  # min(2x8 + 1x8, planner.max_gpus)
    assert "decode_scale_up_kv_rate" not in conf
    assert any("12.5 -> 12 s" in n for n in ex.planner.notes)


def test_agg_planner_has_a_frontend_even_with_one_worker() -> None:
    planner = {"min_workers": 1, "max_workers": 3}
    fields = {"model": MODEL, "gpu": "h200_sxm", "tp": 2, "router": "kv_load", "planner": planner}
    ex = run(DeploymentConfig.from_dict(fields).to_dict())
    assert ex.pools == ()
    assert ex.router is not None
    a = parse(frontend_parser(), ex.router.commands[0], 3)
    assert (a.router_mode, a.router_kv_overlap_score_weight) == ("kv", 0.0)
    assert ex.planner is not None
    conf = planner_config(ex.planner.commands[0])
    assert (conf["mode"], conf["min_endpoint"], conf["max_gpu_budget"]) == ("agg", 1, 6)
    assert not any(k.startswith(("prefill_", "decode_engine", "decode_min")) for k in conf)


def test_disagg_text_and_json_forms_agree() -> None:
    ex = run(config("vllm", planner={"policy": "sla"}))
    d = ex.to_dict()
    commands = [c for part in (d["engine"], *d["pools"], d["planner"], d["aiperf"])
                for c in part["commands"]]  # fmt: skip
    assert len(commands) == 1 + 2 + 3 + 1 + 1
    text = ex.to_text().replace("\\\n", " ")
    for c in commands:
        assert shlex.split(c["command"])[len(c["env"]) :] == c["argv"]
        assert " ".join(c["command"].split()) in " ".join(text.split())
    assert json.loads(json.dumps(d)) == d
    aiperf_notes = " ".join(ex.aiperf.notes)
    assert "standalone replicas" not in aiperf_notes
