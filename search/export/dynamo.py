"""NVIDIA Dynamo: the frontend and router, disaggregated prefill/decode pools, the planner.

Flag names were checked against these sources (read for facts, no code copied):

* NVIDIA Dynamo: the ``ai-dynamo`` 1.6.1 wheel: ``dynamo/frontend/frontend_args.py``
  (``--http-port``, ``--kv-cache-block-size``), ``dynamo/common/configuration/groups/
  router_args.py`` (``--router-mode`` round-robin | random | least-loaded | kv ...) and
  ``kv_router_args.py`` (``--router-kv-overlap-score-weight``, hidden and deprecated in 1.6.1 in
  favour of ``prefill_load_scale`` in ``--router-policy-config``, removal planned for v1.7;
  ``--router-temperature``); ``dynamo/trtllm/backend_args.py``; ``dynamo.vllm`` and
  ``dynamo.sglang`` parse the engines' own flags (``dynamo/vllm/args.py``).
* Disaggregated serving (``mode: disagg``), Dynamo only: the ``ai-dynamo`` 1.6.1 wheel:
  ``dynamo/vllm/backend_args.py``, ``dynamo/trtllm/backend_args.py`` (``--disaggregation-mode``
  agg | pd | prefill | decode | encode; the older ``--is-prefill-worker`` is gone and Dynamo strips
  it), ``dynamo/vllm/args.py`` (a vLLM prefill worker needs ``--kv-transfer-config``; its NIXL
  equivalent has ``kv_role`` ``kv_producer`` on prefill, ``kv_consumer`` on decode workers),
  ``dynamo/sglang/args.py`` (SGLang's own ``--disaggregation-mode``; Dynamo picks the bootstrap
  port), ``kv_router_args.py`` (experimental ``--router-conditional-disagg`` and
  ``--router-conditional-disagg-config`` with ``policy`` isl_bounding and ``eff_isl_threshold``),
  ``dynamo/planner/__main__.py`` and ``dynamo/planner/config/planner_config.py``
  (``python -m dynamo.planner --config JSON``: ``backend``, ``mode``, ``optimization_target``
  sla | load, ``max_gpu_budget``, ``min_endpoint``, ``prefill_min_endpoint``,
  ``decode_min_endpoint``, ``prefill_engine_num_gpu``, ``decode_engine_num_gpu``, ``ttft_ms``,
  ``itl_ms``, ``load_predictor`` constant ..., integer ``throughput_adjustment_interval_seconds``
  and ``load_adjustment_interval_seconds``, ``decode_scale_up_kv_rate`` and
  ``decode_scale_down_kv_rate`` in percent, ``prefill_scale_up_queue_tokens`` and
  ``prefill_scale_down_queue_tokens``; no per-pool worker maximum). vLLM's
  ``--kv-transfer-config`` (JSON) is in ``vllm/engine/arg_utils.py`` at 99d7eb5d; SGLang 0.5.23's
  ``sglang/srt/arg_groups/fields/disagg.py`` has ``--disaggregation-mode null | prefill |
  decode`` and ``--disaggregation-transfer-backend`` (mooncake default, nixl ...); TensorRT-LLM's
  ``llm_args.py`` (2026 snapshot) has ``cache_transceiver_config: {backend: DEFAULT | UCX | NIXL |
  MOONCAKE | MPI}``, and Dynamo 1.6.1's profiler tests give TRT-LLM workers ``{backend: DEFAULT}``.
"""

from __future__ import annotations

import json
from typing import Any

from dynosim.config import DeploymentConfig, PoolConfig
from dynosim.perf.hardware import GPUS_PER_NODE
from search.export.engines import devices, sglang_flags, trtllm_options, vllm_flags
from search.export.parts import FRONTEND_PORT, Command, Part, num
from search.export.quant import engine_env, served_model

_ROUTER_MODES = {
    "round_robin": "round-robin",
    "random": "random",
    "least_loaded": "least-loaded",
    "kv_aware": "kv",
    "kv_load": "kv",  # Dynamo's KV router with the prefix-overlap weight at 0
}


def _frontend(cfg: DeploymentConfig, block_size: int) -> tuple[Command, list[str]]:
    """``python -m dynamo.frontend`` with the deployment's ``router``, and notes on it."""
    mode = _ROUTER_MODES[cfg.router]
    argv = ["python", "-m", "dynamo.frontend", "--http-port", str(FRONTEND_PORT),
            "--router-mode", mode]  # fmt: skip
    notes = []
    if cfg.router in ("kv_aware", "kv_load"):
        kv = cfg.kv_router
        weight = kv.overlap_weight if cfg.router == "kv_aware" else 0.0
        argv += ["--router-kv-overlap-score-weight", num(weight),
                 "--router-temperature", num(kv.temperature),
                 "--kv-cache-block-size", str(block_size)]  # fmt: skip
        notes.append(
            "Dynamo 1.6.1 hides --router-kv-overlap-score-weight (deprecated for "
            "prefill_load_scale in --router-policy-config, removal planned for v1.7)"
        )
        if cfg.router == "kv_load":
            notes.append("router kv_load = Dynamo's KV router with the overlap weight at 0")
    elif cfg.router == "least_loaded":
        notes.append("--router-mode least-loaded needs Dynamo >= 1.6 (older: round-robin)")
    else:
        notes.append(f"kv_router knobs unused with router {cfg.router}")
    return Command(tuple(argv)), notes


def _dynamo_worker(cfg: DeploymentConfig, yaml_path: str, *, kv_events: bool) -> list[str]:
    """``python -m dynamo.BACKEND`` with the engine flags of ``cfg`` (one pool's view)."""
    if cfg.backend == "vllm":
        flags, _, _ = vllm_flags(cfg, yaml_path)
        return ["python", "-m", "dynamo.vllm", "--model", served_model(cfg), *flags]
    if cfg.backend == "sglang":
        flags, _, _ = sglang_flags(cfg, yaml_path)
        return ["python", "-m", "dynamo.sglang", "--model-path", served_model(cfg), *flags]
    e = cfg.engine
    worker = ["python", "-m", "dynamo.trtllm", "--model", served_model(cfg),
              "--tensor-parallel-size", str(cfg.tp * cfg.attention_dp),
              "--max-batch-size", str(e.max_num_seqs),
              "--max-num-tokens", str(e.max_num_batched_tokens),
              "--kv-block-size", str(e.block_size),
              "--free-gpu-memory-fraction", num(e.gpu_memory_utilization),
              "--extra-engine-args", yaml_path]  # fmt: skip
    if kv_events:
        worker.append("--publish-kv-events")
    return worker


def router_part(cfg: DeploymentConfig, yaml_path: str) -> Part:
    """NVIDIA Dynamo's frontend with the trial's router, and Dynamo workers behind it."""
    frontend, notes = _frontend(cfg, cfg.engine.block_size)
    notes.insert(
        0,
        "Dynamo's frontend routes only to workers registered with it (etcd/NATS): run the "
        f"replicas as `python -m dynamo.{cfg.backend}` below instead of the standalone servers",
    )
    commands = [frontend]
    worker = _dynamo_worker(cfg, yaml_path, kv_events=cfg.router in ("kv_aware", "kv_load"))
    commands += [Command(tuple(worker), devices(cfg, r)) for r in range(cfg.workers)]
    mode = _ROUTER_MODES[cfg.router]
    title = f"router: NVIDIA Dynamo frontend ({mode}) in front of {cfg.workers} workers"
    return Part(title, tuple(commands), tuple(notes))


# --------------------------------------------------------------------------- disaggregated
def placements(cfg: DeploymentConfig) -> list[tuple[str, PoolConfig, list[int]]]:
    """Each pool with the first GPU of each of its workers: prefill first, then decode.

    GPUs are numbered node by node (:data:`GPUS_PER_NODE` a node); a worker whose TP group
    would straddle two nodes starts on the next one.
    """
    out: list[tuple[str, PoolConfig, list[int]]] = []
    gpu = 0
    for name, pool in cfg.pools():
        firsts = []
        for _ in range(pool.workers):
            if pool.tp <= GPUS_PER_NODE and gpu % GPUS_PER_NODE + pool.tp > GPUS_PER_NODE:
                gpu += GPUS_PER_NODE - gpu % GPUS_PER_NODE
            firsts.append(gpu)
            gpu += pool.tp
        out.append((name, pool, firsts))
    return out


def _gpu_env(first: int, tp: int) -> tuple[tuple[str, str], ...]:
    if tp > GPUS_PER_NODE:
        return ()
    ids = ",".join(str(first % GPUS_PER_NODE + i) for i in range(tp))
    return (("CUDA_VISIBLE_DEVICES", ids),)


_NIXL_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer"}


def pool_part(
    cfg: DeploymentConfig, name: str, pool: PoolConfig, firsts: list[int], yaml_path: str
) -> tuple[Part, str | None]:
    """One Dynamo worker command per worker of the ``name`` pool (``prefill`` or ``decode``).

    Returns:
        The part, and the pool's TRT-LLM YAML (``None`` for the other backends).
    """
    view = cfg.pool_view("prefill" if name == "prefill" else "decode")
    router = cfg.router if name == "prefill" else cfg.decode_router
    argv = _dynamo_worker(view, yaml_path, kv_events=router in ("kv_aware", "kv_load"))
    role = ["--disaggregation-mode", name]
    notes = []
    if cfg.backend == "vllm":
        connector = {"kv_connector": "NixlConnector", "kv_role": _NIXL_ROLE[name]}
        role += ["--kv-transfer-config", json.dumps(connector, separators=(",", ":"))]
    elif cfg.backend == "sglang":
        role += ["--disaggregation-transfer-backend", "nixl"]
        if name == "prefill":
            notes.append(
                "Dynamo picks each SGLang prefill worker's --disaggregation-bootstrap-port"
            )
    argv[5:5] = role  # after `python -m dynamo.X --model MODEL`
    yaml_text = None
    if cfg.backend == "trtllm":
        import yaml

        options = {**trtllm_options(view), "cache_transceiver_config": {"backend": "DEFAULT"}}
        yaml_text = yaml.safe_dump(options, sort_keys=False)
        notes.append(
            f"{yaml_path}: this pool's LLM API options; cache_transceiver_config moves the KV "
            "cache (backend DEFAULT lets TRT-LLM pick the transport)"
        )
    if cfg.gpus > GPUS_PER_NODE:
        nodes = ", ".join(f"#{i} node {f // GPUS_PER_NODE}" for i, f in enumerate(firsts))
        notes.append(f"{GPUS_PER_NODE} GPUs a node; run each worker on its node: {nodes}")
    commands = tuple(Command(tuple(argv), _gpu_env(f, pool.tp) + engine_env(cfg)) for f in firsts)
    title = f"{name}: {pool.workers} Dynamo {cfg.backend} worker(s) x TP {pool.tp}"
    return Part(title, commands, tuple(notes)), yaml_text


def frontend_part(cfg: DeploymentConfig) -> Part:
    """Dynamo's frontend in front of a disaggregated deployment's two pools."""
    pools = dict(cfg.pools())
    prefill, decode = pools["prefill"], pools["decode"]
    frontend, notes = _frontend(cfg, prefill.engine.block_size)
    notes.insert(
        0,
        "Dynamo only: the frontend finds the prefill and decode workers below as they "
        "register (etcd/NATS) and sends each request to a prefill worker, then a decode worker",
    )
    if prefill.engine.block_size != decode.engine.block_size:
        notes.append(
            f"block sizes differ (prefill {prefill.engine.block_size}, decode "
            f"{decode.engine.block_size}): unverified that the KV transfer supports it"
        )
    notes.append(
        f"decode_router {cfg.decode_router}: no direct flag; Dynamo 1.6.1 picks decode workers "
        "with worker_selection.decode in --router-policy-config (not mapped here)"
    )
    if cfg.max_local_prefill_tokens:
        config = {"policy": "isl_bounding", "eff_isl_threshold": cfg.max_local_prefill_tokens}
        notes.append(
            f"max_local_prefill_tokens {cfg.max_local_prefill_tokens}: the closest Dynamo 1.6.1 "
            "option is the experimental --router-conditional-disagg "
            f"--router-conditional-disagg-config '{json.dumps(config)}' (unverified that its "
            "effective ISL is the prompt's uncached tokens on the decode worker)"
        )
    mode = _ROUTER_MODES[cfg.router]
    title = (
        f"frontend: NVIDIA Dynamo ({mode}) in front of {prefill.workers} prefill + "
        f"{decode.workers} decode workers"
    )
    return Part(title, (frontend,), tuple(notes))


# --------------------------------------------------------------------------- planner
def planner_part(cfg: DeploymentConfig) -> Part:
    """``python -m dynamo.planner --config JSON`` with the settings Dynamo 1.6.1 has."""
    p = cfg.planner
    assert p is not None
    conf: dict[str, Any] = {"backend": cfg.backend, "mode": cfg.mode,
                            "max_gpu_budget": cfg.peak_gpus}  # fmt: skip
    notes = [
        f"max_gpu_budget {cfg.peak_gpus}: the planner's ceiling in dynosim (planner.max_gpus "
        f"{p.max_gpus}, the pools' max_workers x TP)",
    ]
    if cfg.mode == "disagg":
        pools = dict(cfg.pools())
        conf["prefill_engine_num_gpu"] = pools["prefill"].tp
        conf["decode_engine_num_gpu"] = pools["decode"].tp
        conf["prefill_min_endpoint"] = p.limits("prefill").min_workers
        conf["decode_min_endpoint"] = p.limits("decode").min_workers
    else:
        conf["min_endpoint"] = p.min_workers
    maxima = ", ".join(f"{n} {p.limits(n).max_workers}" for n, _ in cfg.pools())
    notes.append(f"max_workers ({maxima}): Dynamo 1.6.1 has no per-pool maximum, only the budget")
    interval = max(1, round(p.adjustment_interval_s))
    if interval != p.adjustment_interval_s:
        notes.append(f"adjustment_interval_s {p.adjustment_interval_s:g} -> {interval} s "
                     "(Dynamo takes whole seconds)")  # fmt: skip
    if p.policy == "sla":
        conf |= {"optimization_target": "sla", "load_predictor": "constant",
                 "throughput_adjustment_interval_seconds": interval}  # fmt: skip
        for key, value in (("ttft_ms", cfg.slo.ttft_ms), ("itl_ms", cfg.slo.itl_ms)):
            if value is not None:
                conf[key] = value
        notes.append(
            "the SLA planner sizes pools from a performance model (pre_deployment_sweeping_mode "
            "rapid: AIConfigurator); dynosim uses its own step-time model"
        )
    else:
        up, down = p.kv_scale_up * 100, p.kv_scale_down * 100
        conf |= {"optimization_target": "load", "load_adjustment_interval_seconds": interval,
                 "decode_scale_up_kv_rate": min(up, 100.0),
                 "decode_scale_down_kv_rate": min(down, 100.0)}  # fmt: skip
        if up > 100:
            notes.append(f"kv_scale_up {p.kv_scale_up:g} never triggers; capped at Dynamo's 100%")
        if up <= down:
            notes.append("Dynamo needs decode_scale_up_kv_rate > decode_scale_down_kv_rate")
        if cfg.mode == "disagg":
            notes.append(
                "Dynamo needs prefill_scale_up_queue_tokens and prefill_scale_down_queue_tokens "
                "(queued prefill tokens per worker) too: dynosim's queue_scale_up "
                f"{p.queue_scale_up:g} / queue_scale_down {p.queue_scale_down:g} are waiting "
                "requests per worker, so add about these times the mean prompt length"
            )
        notes.append(
            "dynosim also scales decode/aggregated pools on their queue; Dynamo only on KV usage"
        )
    notes.append(
        f"metric_pulling_interval_s {p.metric_pulling_interval_s:g}: Dynamo reads its metrics "
        "from Prometheus (no such setting); startup_s is dynosim's model of a worker's start"
    )
    notes.append(
        "the planner scales a Kubernetes DynamoGraphDeployment (environment kubernetes, the "
        "default); with environment virtual it only publishes its decisions"
    )
    argv = ("python", "-m", "dynamo.planner", "--config", json.dumps(conf, separators=(",", ":")))
    title = f"planner: Dynamo planner ({conf['optimization_target']}, mode {cfg.mode})"
    return Part(title, (Command(argv),), tuple(notes))
