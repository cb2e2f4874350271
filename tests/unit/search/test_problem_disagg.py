"""Problems over disaggregated deployments: deep knob paths, mode-aware configs, GPU budgets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from dynosim.errors import ConfigError, InfeasibleError
from search.study.deployment import nested_names
from search.study.objectives import Objective
from search.study.problem import Problem
from search.study.space import Params, Space
from tests.unit.search.fakes import study

BASE: dict[str, Any] = {
    "model": "m",
    "gpu": "g",
    "mode": "disagg",
    "engine": {"block_size": 32, "max_num_seqs": 128},
    "prefill": {"tp": 2, "workers": 2},
    "decode": {"tp": 1, "workers": 4},
    "slo": {"ttft_ms": 1000.0},
}


def choice(*values: object, **extra: Any) -> dict[str, Any]:
    return {"type": "choice", "values": list(values), **extra}


def problem(knobs: dict[str, Any], base: dict[str, Any] | None = None, **kw: Any) -> Problem:
    return Problem(
        space=Space.from_dict({"knobs": knobs}),
        objectives=(Objective("output_token_throughput_per_gpu", "maximize"),),
        base=BASE if base is None else base,
        **kw,
    )


DEEP = {
    "prefill.tp": choice(1, 2, 4),
    "prefill.workers": {"type": "int", "low": 1, "high": 4},
    "prefill.engine.max_num_batched_tokens": choice(4096, 16384),
    "decode.tp": choice(1, 2),
    "decode.workers": {"type": "int", "low": 1, "high": 8},
    "decode.engine.max_num_seqs": choice(256, 512),
    "kv_transfer.gbps": {"type": "float", "low": 100.0, "high": 900.0},
    "kv_transfer.link": choice("nvlink", "rdma"),
    "max_local_prefill_tokens": choice(0, 512),
    "decode_router": choice("least_loaded", "kv_load"),
    "planner.policy": choice("load", "sla"),
    "planner.adjustment_interval_s": choice(10.0, 30.0),
    "planner.startup_s": choice(60.0),
    "planner.kv_scale_up": choice(0.8, 0.95),
    "planner.prefill.max_workers": choice(3, 6),
    "planner.decode.min_workers": choice(1, 2),
}
DEEP_POINT: Params = {
    "prefill.tp": 4,
    "prefill.workers": 1,
    "prefill.engine.max_num_batched_tokens": 16384,
    "decode.tp": 2,
    "decode.workers": 3,
    "decode.engine.max_num_seqs": 512,
    "kv_transfer.gbps": 400.0,
    "kv_transfer.link": "rdma",
    "max_local_prefill_tokens": 512,
    "decode_router": "kv_load",
    "planner.policy": "sla",
    "planner.adjustment_interval_s": 10.0,
    "planner.startup_s": 60.0,
    "planner.kv_scale_up": 0.95,
    "planner.prefill.max_workers": 3,
    "planner.decode.min_workers": 2,
}


def test_deep_knob_paths_build_the_config() -> None:
    cfg = problem(DEEP).to_config(DEEP_POINT)
    assert cfg.mode == "disagg"
    assert cfg.prefill is not None
    assert cfg.decode is not None
    assert (cfg.prefill.tp, cfg.prefill.workers) == (4, 1)
    assert (cfg.decode.tp, cfg.decode.workers) == (2, 3)
    assert cfg.gpus == 10
    # the pool's own knob laid over the top-level engine of the base
    assert cfg.prefill.engine.max_num_batched_tokens == 16384
    assert (cfg.prefill.engine.block_size, cfg.prefill.engine.max_num_seqs) == (32, 128)
    assert (cfg.decode.engine.max_num_seqs, cfg.decode.engine.block_size) == (512, 32)
    assert (cfg.kv_transfer.link, cfg.kv_transfer.gbps) == ("rdma", 400.0)
    assert (cfg.max_local_prefill_tokens, cfg.decode_router) == (512, "kv_load")
    p = cfg.planner
    assert p is not None
    assert (p.policy, p.adjustment_interval_s, p.startup_s, p.kv_scale_up) == (
        "sla", 10.0, 60.0, 0.95,
    )  # fmt: skip
    assert p.limits("prefill").max_workers == 3
    assert (p.limits("decode").min_workers, p.limits("decode").max_workers) == (2, 8)
    assert p.max_gpus is None  # no gpu_budget: nothing filled in


def test_config_dict_nests_deep_knobs_without_touching_the_base() -> None:
    prob = problem(DEEP)
    data = prob.config_dict(DEEP_POINT)
    assert data["prefill"] == {"tp": 4, "workers": 1, "engine": {"max_num_batched_tokens": 16384}}
    assert data["planner"]["prefill"] == {"max_workers": 3}
    assert data["kv_transfer"] == {"gbps": 400.0, "link": "rdma"}
    assert BASE["prefill"] == {"tp": 2, "workers": 2}  # the base is copied, never changed


@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("prefill.engine.max_num_seq", "one of prefill.engine.max_num_seqs, "),
        ("decode.engin.max_num_seqs", "one of decode.tp, decode.workers, decode.engine"),
        ("planner.prefill.max_worker", "one of planner.prefill.min_workers, "
                                       "planner.prefill.max_workers"),
        ("planner.polcy", "one of planner.policy, planner.adjustment_interval_s"),
        ("kv_transfer.bandwidth", "one of kv_transfer.link, kv_transfer.gbps, "
                                  "kv_transfer.latency_us"),
        ("prefill", "a field of the prefill section: prefill.tp, prefill.workers, prefill.engine"),
        ("planner.decode", "a field of the planner.decode section: planner.decode.min_workers"),
        ("mode.x", "mode (a plain field, no subfields)"),
        ("prefill.tp.x", "prefill.tp (a plain field, no subfields)"),
        ("pool.tp", "one of model, gpu, backend"),
    ],
)  # fmt: skip
def test_unknown_deep_paths_are_one_line_errors(name: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as info:
        problem({name: choice(1)})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"knobs.{name}: got {name!r}; allowed: ")
    assert allowed in message


def test_nested_names_follow_any_depth() -> None:
    assert nested_names("prefill") == ("tp", "workers", "engine", "ep", "moe_tp", "attention_dp")
    assert nested_names("decode.engine")[:2] == ("max_num_seqs", "max_num_batched_tokens")
    assert nested_names("planner.prefill") == ("min_workers", "max_workers")
    assert "policy" in nested_names("planner")
    assert nested_names("kv_transfer") == ("link", "gbps", "latency_us")
    assert nested_names("engine")[0] == "max_num_seqs"
    assert nested_names("tp") == nested_names("prefill.tp") == nested_names("nope") == ()


MODE_KNOBS: dict[str, Any] = {
    "mode": choice("agg", "disagg"),
    "tp": choice(1, 2, when={"mode": "agg"}),
    "prefill.tp": choice(1, 2, when={"mode": "disagg"}),
    "decode.workers": choice(2, 6, when={"mode": "disagg"}),
    "max_local_prefill_tokens": choice(0, 256, when={"mode": "disagg"}),
    "planner.decode.max_workers": choice(6, 8, when={"mode": "disagg"}),
    "planner.policy": choice("load", "sla"),
}
MIXED_BASE = {**BASE, "tp": 4, "workers": 2, "planner": {"prefill": {"max_workers": 4}}}
"""Fixes fields of both modes: each point keeps only those of its own mode."""


def test_mode_conditional_knobs_build_both_modes() -> None:
    prob = problem(MODE_KNOBS, MIXED_BASE)
    agg = prob.config_dict({"mode": "agg", "tp": 2, "planner.policy": "load"})
    assert "prefill" not in agg
    assert "decode" not in agg
    assert "max_local_prefill_tokens" not in agg
    assert agg["planner"] == {"policy": "load"}  # its pool limits dropped with the pools
    assert (agg["tp"], agg["workers"]) == (2, 2)
    cfg = prob.to_config({"mode": "agg", "tp": 2, "planner.policy": "load"})
    assert (cfg.mode, cfg.tp, cfg.workers, cfg.gpus) == ("agg", 2, 2, 4)
    point: Params = {"mode": "disagg", "prefill.tp": 1, "decode.workers": 6,
                     "max_local_prefill_tokens": 256, "planner.decode.max_workers": 8,
                     "planner.policy": "sla"}  # fmt: skip
    disagg = prob.config_dict(point)
    assert "tp" not in disagg
    assert "workers" not in disagg
    cfg = prob.to_config(point)
    assert cfg.prefill is not None
    assert cfg.decode is not None
    assert (cfg.prefill.tp, cfg.prefill.workers, cfg.decode.tp, cfg.decode.workers) == (1, 2, 1, 6)
    assert cfg.max_local_prefill_tokens == 256
    assert cfg.planner is not None
    assert cfg.planner.limits("prefill").max_workers == 4  # from the base
    assert cfg.planner.limits("decode").max_workers == 8
    # every grid point of the space builds, in either mode: 2 agg x 2 + 16 disagg x 2
    points = list(prob.space.grid())
    assert len(points) == 36
    assert all(prob.buildable(p) for p in points)


@pytest.mark.parametrize(
    ("knobs", "base", "fragment"),
    [
        ({"tp": choice(1, 2)}, BASE,
         "knobs.tp: got 'tp'; allowed: no top-level tp knob with mode: disagg (tune prefill.tp "
         "and decode.tp, or add when: {mode: agg})"),
        ({"mode": choice("agg", "disagg"), "workers": choice(1, 2)}, BASE,
         "no top-level workers knob with mode: disagg"),
        ({"mode": choice("agg", "disagg"), "tp": choice(1, when={"mode": ["agg", "disagg"]})},
         BASE, "no top-level tp knob with mode: disagg"),
        ({"mode": choice("agg", "disagg"), "prefill.tp": choice(1, 2)}, BASE,
         "knobs.prefill.tp: got 'prefill.tp'; allowed: a disagg-only field, a knob only with "
         "mode: disagg (add when: {mode: disagg})"),
        ({"decode.engine.max_num_seqs": choice(64)}, {"model": "m", "gpu": "g"},
         "knobs.decode.engine.max_num_seqs"),
        ({"planner.prefill.max_workers": choice(4)}, {"model": "m", "gpu": "g", "mode": "agg"},
         "knobs.planner.prefill.max_workers"),
        ({"router": choice("kv_aware", "round_robin"),
          "mode": choice("disagg", when={"router": "kv_aware"}),
          "decode.tp": choice(1)}, {"model": "m", "gpu": "g"},
         "knobs.decode.tp"),  # mode inactive -> the base's agg, where decode.tp is no field
    ],
)  # fmt: skip
def test_knob_of_the_wrong_mode_is_a_space_error(
    knobs: dict[str, Any], base: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        problem(knobs, base)


def test_knobs_scoped_to_their_mode_are_accepted() -> None:
    problem({"tp": choice(1, 2)}, {"model": "m", "gpu": "g"})  # agg by default
    problem({"prefill.tp": choice(1, 2)}, BASE)  # disagg fixed
    problem({"mode": choice("disagg"), "prefill.tp": choice(1, 2)}, {"model": "m", "gpu": "g"})
    problem(MODE_KNOBS, MIXED_BASE)
    scoped = {"router": choice("kv_aware", "round_robin"),
              "mode": choice("agg", "disagg", when={"router": "kv_aware"}),
              "decode.tp": choice(1, when={"mode": "disagg"})}  # fmt: skip
    problem(scoped, {"model": "m", "gpu": "g"})  # active only when mode is, and disagg


def test_disagg_over_budget_is_infeasible_with_reason() -> None:
    prob = problem({"decode.workers": {"type": "int", "low": 1, "high": 8}}, gpu_budget=6)
    assert prob.to_config({"decode.workers": 2}).gpus == 6
    with pytest.raises(InfeasibleError) as info:
        prob.to_config({"decode.workers": 4})
    assert str(info.value) == "prefill 2x2 + decode 4x1 = 8 GPUs exceeds the GPU budget of 6"
    assert not prob.buildable({"decode.workers": 3})


def test_disagg_derives_no_workers_from_the_budget() -> None:
    prob = problem({"prefill.tp": choice(1, 2, 4)}, gpu_budget=16)
    data = prob.config_dict({"prefill.tp": 4})
    assert "workers" not in data
    assert "tp" not in data
    assert prob.to_config({"prefill.tp": 4}).gpus == 4 * 2 + 1 * 4
    # a pool TP beyond the budget is an over-budget config, not a crash
    with pytest.raises(InfeasibleError, match=re.escape("prefill 2x4 + decode 4x1 = 12 GPUs")):
        problem({"prefill.tp": choice(4)}, gpu_budget=8).to_config({"prefill.tp": 4})


def test_planner_gets_the_budget_as_max_gpus() -> None:
    base = {**BASE, "planner": {"policy": "load", "max_workers": 8}}
    prob = problem({"planner.kv_scale_up": choice(0.9)}, base, gpu_budget=12)
    data = prob.config_dict({"planner.kv_scale_up": 0.9})
    assert data["planner"]["max_gpus"] == 12
    assert "max_gpus" not in base["planner"]
    cfg = prob.to_config({"planner.kv_scale_up": 0.9})
    assert cfg.planner is not None
    assert cfg.planner.max_gpus == 12
    assert cfg.gpus == 8
    assert cfg.peak_gpus == 12  # 2*8 + 1*8 = 24 without the budget
    # a planner made by a knob alone gets it too; without a budget nothing is filled in
    only_knob = problem({"planner.policy": choice("sla")}, gpu_budget=8)
    assert only_knob.config_dict({"planner.policy": "sla"})["planner"] == {
        "policy": "sla", "max_gpus": 8,
    }  # fmt: skip
    assert problem({"planner.policy": choice("sla")}).config_dict({"planner.policy": "sla"})[
        "planner"
    ] == {"policy": "sla"}  # fmt: skip


def test_planner_ceiling_over_budget_is_infeasible_with_reason() -> None:
    prob = problem({"planner.max_gpus": choice(8, 16)}, {**BASE, "planner": {"max_workers": 4}},
                   gpu_budget=10)  # fmt: skip
    assert prob.to_config({"planner.max_gpus": 8}).peak_gpus == 8
    with pytest.raises(InfeasibleError) as info:
        prob.to_config({"planner.max_gpus": 16})
    assert str(info.value) == (
        "planner ceiling of 12 GPUs (prefill up to 4x2 + decode up to 4x1; planner.max_gpus=16) "
        "exceeds the GPU budget of 10"
    )


def test_planner_initial_gpus_over_budget_names_the_budget() -> None:
    """Not ``planner.max_gpus: got 6; allowed: >= the initial GPUs (8)``: the budget filled it."""
    prob = problem({"planner.policy": choice("load")}, gpu_budget=6)
    with pytest.raises(InfeasibleError) as info:
        prob.to_config({"planner.policy": "load"})
    assert str(info.value) == "prefill 2x2 + decode 4x1 = 8 GPUs exceeds the GPU budget of 6"


def test_agg_planner_keeps_derived_workers_within_its_bounds() -> None:
    agg = {"model": "m", "gpu": "g", "planner": {"min_workers": 2, "max_workers": 4}}
    prob = problem({"tp": choice(1, 4, 8, 16)}, agg, gpu_budget=16)
    cfg = prob.to_config({"tp": 1})
    assert (cfg.workers, cfg.gpus, cfg.peak_gpus) == (4, 4, 4)  # 16 // 1 = 16, capped at 4
    assert prob.to_config({"tp": 4}).workers == 4
    assert prob.to_config({"tp": 8}).workers == 2
    assert prob.config_dict({"tp": 16})["workers"] == 2  # 16 // 16 = 1, raised to min_workers
    with pytest.raises(InfeasibleError) as info:
        prob.to_config({"tp": 16})
    assert str(info.value) == "tp*workers=32 exceeds the GPU budget of 16"


def test_study_file_with_deep_knobs(tmp_path: Path) -> None:
    deployment = {k: v for k, v in BASE.items() if k not in ("model", "gpu")}
    deployment["decode"] = {"workers": 4}  # its tp is a knob
    space = {"knobs": {"decode.tp": choice(1, 2), "decode.engine.max_num_seqs": choice(64, 256),
                       "planner.policy": choice("load", "sla")}}  # fmt: skip
    sf = study(tmp_path, deployment=deployment, space=space)
    cfg = sf.problem.to_config({"decode.tp": 1, "decode.engine.max_num_seqs": 64,
                                "planner.policy": "sla"})  # fmt: skip
    assert cfg.prefill is not None
    assert cfg.decode is not None
    assert (cfg.prefill.tp, cfg.decode.tp, cfg.decode.engine.max_num_seqs) == (2, 1, 64)
    assert cfg.decode.engine.block_size == 32
    assert cfg.planner is not None
    assert cfg.planner.max_gpus == 8
    with pytest.raises(ConfigError, match=re.escape("deployment.prefill.tpp")):
        study(tmp_path, deployment={**deployment, "prefill": {"tpp": 2}}, space=space)
