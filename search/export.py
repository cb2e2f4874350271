"""A stored trial -> the launch commands of its backend and an AIPerf command that checks it.

Pure functions: a trial's ``DeploymentConfig.to_dict()``, the stored study dict (``study``
user attribute) and the trial's metrics go in; an :class:`Export` of commands, notes and the
TRT-LLM YAML comes out. No file is read or written here (``search.commands.export`` does I/O).
Only knobs with a real equivalent are mapped; every other knob becomes a ``#`` note.

Flag names were checked against these sources (read for facts, no code copied):

* vLLM: ``vllm-project/vllm`` ``vllm/engine/arg_utils.py`` at 99d7eb5d (v0.11 era, late 2025:
  ``--tensor-parallel-size``, ``--max-num-seqs``, ``--max-num-batched-tokens``,
  ``--block-size`` with choices 1/8/16/32/64/128/256 from ``vllm/config/cache.py`` at c1d86421,
  ``--[no-]enable-prefix-caching`` and ``--[no-]enable-chunked-prefill`` as
  ``BooleanOptionalAction``, ``--gpu-memory-utilization``, ``--kv-cache-dtype``,
  ``--quantization``); ``vllm serve MODEL --host --port``.
* SGLang: the ``sglang`` 0.5.23 wheel, ``sglang/srt/arg_groups/fields/*.py`` (ServerArgs fields;
  the flag is ``--field-name``, a bool is ``store_true``): ``--model-path``, ``--tp-size``,
  ``--max-running-requests``, ``--chunked-prefill-size`` (-1 disables), ``--max-prefill-tokens``,
  ``--enable-mixed-chunk``, ``--page-size``, ``--disable-radix-cache``, ``--mem-fraction-static``,
  ``--kv-cache-dtype`` (fp8_e4m3 ...), ``--quantization``.
* TensorRT-LLM: ``NVIDIA/TensorRT-LLM`` ``tensorrt_llm/commands/serve.py`` at 00209af1
  (``trtllm-serve MODEL --backend --tp_size --max_batch_size --max_num_tokens
  --free_gpu_memory_fraction --extra_llm_api_options --enable_chunked_prefill``) and
  ``tensorrt_llm/llmapi/llm_args.py`` (2026 snapshot: ``KvCacheConfig.enable_block_reuse``,
  ``free_gpu_memory_fraction``, ``tokens_per_block``, ``dtype``; ``enable_chunked_prefill``).
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
* AIPerf: the ``aiperf`` 0.13.0 wheel, ``aiperf/config/flags/cli_config.py`` (``profile``:
  ``--concurrency``, ``--request-rate``, ``--arrival-pattern`` constant | poisson | gamma,
  ``--arrival-smoothness`` = gamma shape = 1/CV², ``--isl``/``--osl`` with stddevs,
  ``--input-file --custom-dataset-type mooncake_trace --fixed-schedule``, ``--no-fixed-schedule``,
  ``--synthesis-speedup-ratio`` (trace timestamps divided by it), ``--goodput "tag:value ..."``
  with the tags of ``aiperf/metrics/types/*.py``). 0.13.0 has no ``--fixed-schedule-speedup``.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynosim.config import DeploymentConfig, PoolConfig
from dynosim.errors import DynosimError

FRONTEND_PORT = 8000
GPUS_PER_NODE = 8
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
_ROUTER_MODES = {
    "round_robin": "round-robin",
    "random": "random",
    "least_loaded": "least-loaded",
    "kv_aware": "kv",
    "kv_load": "kv",  # Dynamo's KV router with the prefix-overlap weight at 0
}
_WRAP = 100


@dataclass(frozen=True, slots=True)
class Command:
    """One shell command: environment assignments and an argument vector."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def line(self) -> str:
        """The command on one line, shell-quoted."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)
        return f"{env} {shlex.join(self.argv)}".strip()

    def text(self) -> str:
        """The command, broken before each ``--option`` when it is long."""
        if len(self.line()) <= _WRAP:
            return self.line()
        parts = [" ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)] if self.env else []
        groups: list[list[str]] = [[]]
        for tok in self.argv:
            if tok.startswith("--") and groups[-1]:
                groups.append([])
            groups[-1].append(tok)
        lines = [" ".join([*parts, shlex.join(groups[0])])]
        for g in groups[1:]:
            chunk = shlex.join(g)
            if len(lines[-1]) + 1 + len(chunk) > _WRAP - 2:
                lines.append("    " + chunk)
            else:
                lines[-1] += " " + chunk
        return " \\\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """``{"command", "argv", "env"}``."""
        return {"command": self.line(), "argv": list(self.argv), "env": dict(self.env)}


@dataclass(frozen=True, slots=True)
class Part:
    """A titled group of commands with the notes that explain them."""

    title: str
    commands: tuple[Command, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """``{"title", "commands", "notes"}``."""
        return {
            "title": self.title,
            "commands": [c.to_dict() for c in self.commands],
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Export:
    """Everything ``dynosim export`` prints for one trial.

    Aggregated: ``engine`` holds the standalone replicas and ``router`` Dynamo's frontend with
    Dynamo workers. Disaggregated (Dynamo only): ``engine`` is Dynamo's frontend, ``pools``
    the prefill and the decode workers, ``pool_yamls`` their TRT-LLM YAMLs ``(path, text)``.
    ``planner`` is Dynamo's planner when the deployment has one.
    """

    header: tuple[str, ...]
    engine: Part
    router: Part | None
    aiperf: Part
    trtllm_yaml: str | None = None
    trtllm_yaml_path: str | None = None
    feasible: bool = True
    files: tuple[str, ...] = field(default=())
    pools: tuple[Part, ...] = ()
    pool_yamls: tuple[tuple[str, str], ...] = ()
    planner: Part | None = None

    def yaml_files(self) -> tuple[tuple[str, str], ...]:
        """Every TRT-LLM YAML the commands name, as ``(path, text)``."""
        path, text = self.trtllm_yaml_path, self.trtllm_yaml
        own = ((path, text),) if path is not None and text is not None else ()
        return (*own, *self.pool_yamls)

    def to_text(self) -> str:
        """Plain text: ``#`` comments and commands, blank lines between the parts."""
        lines = [f"# {h}" for h in self.header]
        parts = [self.engine, *([self.router] if self.router else []), *self.pools]
        parts += [*([self.planner] if self.planner else []), self.aiperf]
        for p in parts:
            lines += ["", f"# ---- {p.title}"]
            lines += [f"# {n}" for n in p.notes]
            lines += [c.text() for c in p.commands]
            yamls: tuple[tuple[str | None, str | None], ...] = ()
            if p is self.engine:
                yamls = ((self.trtllm_yaml_path, self.trtllm_yaml),)
            elif self.pools and p is self.pools[-1]:
                yamls = self.pool_yamls
            for path, text in yamls:
                if text is not None:
                    lines += [f"# {path}:"]
                    lines += [f"#   {y}" for y in text.rstrip("\n").splitlines()]
        lines += [f"# wrote {f}" for f in self.files]
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        """The parts as plain data (``--format json``)."""
        return {
            "header": list(self.header),
            "feasible": self.feasible,
            "engine": self.engine.to_dict(),
            "router": self.router.to_dict() if self.router else None,
            "pools": [p.to_dict() for p in self.pools],
            "planner": self.planner.to_dict() if self.planner else None,
            "trtllm_yaml": self.trtllm_yaml,
            "trtllm_yaml_path": self.trtllm_yaml_path,
            "pool_yamls": [{"path": path, "yaml": text} for path, text in self.pool_yamls],
            "aiperf": self.aiperf.to_dict(),
            "files": list(self.files),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialInfo:
    """What the export says about the trial besides its configuration."""

    study_name: str
    number: int
    feasible: bool
    reason: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)


def export_trial(
    config: Mapping[str, Any],
    study: Mapping[str, Any],
    trial: TrialInfo,
    *,
    workload_spec: Mapping[str, Any] | None = None,
    workload_error: str | None = None,
    yaml_dir: str | Path = ".",
) -> Export:
    """The launch commands and the AIPerf check of one stored trial.

    Args:
        config: The trial's ``config`` user attribute (``DeploymentConfig.to_dict()``).
        study: The stored study dict (may be empty: the load is then unknown).
        trial: Name, number, feasibility and metrics of the trial.
        workload_spec: The parsed synthetic workload file when the study uses ``{file: ...}``.
        workload_error: Why that file could not be read, if it could not.
        yaml_dir: Folder the TRT-LLM YAML is (to be) written to; the command names it.

    Raises:
        DynosimError: The stored configuration is not a valid deployment.
    """
    try:
        cfg = DeploymentConfig.from_dict(config)
    except DynosimError as exc:
        raise DynosimError(
            f"trial #{trial.number} has no exportable configuration: {exc}"
        ) from None
    yaml_stem = str(Path(yaml_dir) / f"trtllm-{_slug(trial.study_name)}-trial{trial.number}")
    aiperf = aiperf_part(cfg, study, trial, workload_spec, workload_error)
    planner = planner_part(cfg) if cfg.planner is not None else None
    if cfg.mode == "disagg":
        pools, yamls = [], []
        for name, pool, first in _placements(cfg):
            part, text = pool_part(cfg, name, pool, first, f"{yaml_stem}-{name}.yaml")
            pools.append(part)
            if text is not None:
                yamls.append((f"{yaml_stem}-{name}.yaml", text))
        return Export(
            header=_header(cfg, trial),
            engine=frontend_part(cfg),
            router=None,
            aiperf=aiperf,
            feasible=trial.feasible,
            pools=tuple(pools),
            pool_yamls=tuple(yamls),
            planner=planner,
        )
    yaml_path = f"{yaml_stem}.yaml"
    engine, yaml_text = engine_part(cfg, yaml_path)
    return Export(
        header=_header(cfg, trial),
        engine=engine,
        router=router_part(cfg, yaml_path) if cfg.workers > 1 or planner else None,
        aiperf=aiperf,
        trtllm_yaml=yaml_text,
        trtllm_yaml_path=yaml_path if yaml_text is not None else None,
        feasible=trial.feasible,
        planner=planner,
    )


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name) or "study"


def _num(v: float) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _header(cfg: DeploymentConfig, trial: TrialInfo) -> tuple[str, ...]:
    state = "feasible" if trial.feasible else f"INFEASIBLE: {trial.reason or 'SLO violated'}"
    if cfg.mode == "disagg":
        layout = " + ".join(f"{n} {p.workers} x {p.tp}" for n, p in cfg.pools())
        routers = f"router {cfg.router}, decode_router {cfg.decode_router}"
    else:
        layout, routers = f"{cfg.workers} x {cfg.tp}", f"router {cfg.router}"
    lines = [
        f"dynosim export: study {trial.study_name}, trial #{trial.number} ({state})",
        f"{cfg.model} on {layout} {cfg.gpu} ({cfg.gpus} GPUs), backend {cfg.backend}, "
        f"{cfg.dtype}, {routers}",
    ]
    if not trial.feasible:
        lines.append("exported anyway: the simulation says this configuration misses its SLOs")
    m = trial.metrics
    shown = [(k, m[k]) for k in _PREDICTED if isinstance(m.get(k), int | float)]
    if shown:
        lines.append("simulated: " + ", ".join(f"{k} {v:.4g}" for k, v in shown))
    extra = ""
    if cfg.mode == "disagg":
        kv = cfg.kv_transfer
        extra = f", kv_transfer link={kv.link} gbps={kv.gbps} latency_us={kv.latency_us}"
    if cfg.planner is not None:
        extra += f", planner.startup_s={cfg.planner.startup_s:g}"
    lines.append(
        "simulator-only fields (no engine flag): "
        f"timing={cfg.timing}, gpu_hour_usd={cfg.gpu_hour_usd}, "
        f"framework_overhead_us={cfg.framework_overhead_us}{extra}"
    )
    return tuple(lines)


_PREDICTED = (
    "load_level",
    "time_to_first_token.p90",
    "inter_token_latency.p90",
    "request_throughput",
    "output_token_throughput_per_gpu",
    "goodput",
)


# --------------------------------------------------------------------------- engines
def _devices(cfg: DeploymentConfig, replica: int) -> tuple[tuple[str, str], ...]:
    gpus = cfg.tp * cfg.attention_dp  # a replica's GPUs
    first = replica * gpus
    if gpus > GPUS_PER_NODE:
        return ()
    ids = ",".join(str((first + i) % GPUS_PER_NODE) for i in range(gpus))
    return (("CUDA_VISIBLE_DEVICES", ids),)


def _quant(cfg: DeploymentConfig, notes: list[str], kv_flag: tuple[str, str] | None) -> list[str]:
    """Flags and notes for the dtypes other than bf16 and fp8 and an FP8 KV cache of its own."""
    if cfg.dtype not in ("bf16", "fp8"):
        notes.append(
            f"dtype {cfg.dtype}: serve a {cfg.dtype} checkpoint; the engine reads the weights' "
            "quantization from it"
        )
    if kv_flag is not None and cfg.kv_dtype == "fp8":
        return list(kv_flag)
    return []


def _parallel(cfg: DeploymentConfig, notes: list[str]) -> list[str]:
    """Expert- and attention-data-parallel flags of vLLM and SGLang (TRT-LLM: in its YAML).

    vLLM: ``--data-parallel-size d`` ranks of ``--tensor-parallel-size tp``, and
    ``--enable-expert-parallel`` spreads the experts over all ``tp x d`` GPUs. SGLang:
    ``--tp-size`` counts every GPU of the replica, ``--enable-dp-attention --dp-size d`` splits
    attention into ``d`` ranks, ``--ep-size`` the experts.
    """
    dp, ep = cfg.attention_dp, cfg.ep
    flags: list[str] = []
    if cfg.backend == "vllm":
        if dp > 1:
            flags += ["--data-parallel-size", str(dp)]
        if ep > 1:
            flags.append("--enable-expert-parallel")
            if ep != cfg.tp * dp:
                notes.append(f"ep {ep}: vLLM's expert parallelism spans all tp x dp = "
                             f"{cfg.tp * dp} GPUs")  # fmt: skip
    elif cfg.backend == "sglang":
        if dp > 1:
            flags += ["--enable-dp-attention", "--dp-size", str(dp)]
        if ep > 1:
            flags += ["--ep-size", str(ep)]
    return flags


def _port(cfg: DeploymentConfig, replica: int) -> int:
    return FRONTEND_PORT if cfg.workers == 1 else FRONTEND_PORT + 1 + replica


def engine_part(cfg: DeploymentConfig, yaml_path: str) -> tuple[Part, str | None]:
    """One standalone server per worker replica, and the TRT-LLM YAML (``None`` otherwise)."""
    flags, notes, yaml_text = _ENGINE_FLAGS[cfg.backend](cfg, yaml_path)
    flags += _host_flags(cfg, notes)
    commands = []
    for r in range(cfg.workers):
        host_port = ("--host", "0.0.0.0", "--port", str(_port(cfg, r)))
        prog = {
            "vllm": ("vllm", "serve", cfg.model),
            "sglang": ("python", "-m", "sglang.launch_server", "--model-path", cfg.model),
            "trtllm": ("trtllm-serve", cfg.model),
        }[cfg.backend]
        commands.append(Command((*prog, *host_port, *flags), _devices(cfg, r)))
    if cfg.gpus > GPUS_PER_NODE:
        notes.append(
            f"{cfg.gpus} GPUs: replicas are numbered node by node ({GPUS_PER_NODE} GPUs a node); "
            "run each on its node"
        )
    title = f"engine: {cfg.workers} {cfg.backend} replica(s) x TP {cfg.tp}"
    return Part(title, tuple(commands), tuple(notes)), yaml_text


def _host_flags(cfg: DeploymentConfig, notes: list[str]) -> list[str]:
    """The host-process flags of a standalone server.

    vLLM ``--api-server-count`` (vllm-project/vllm PR #17546), SGLang ``--tokenizer-worker-num``
    (sgl-project/sglang PR #8964), TensorRT-LLM ``--num_postprocess_workers``
    (tensorrt_llm/commands/serve.py); the host's costs are simulator inputs with no flag.
    """
    h = cfg.host
    if h is None:
        return []
    if h.request_us or h.input_token_us or h.output_token_us:
        notes.append("host request_us/input_token_us/output_token_us: simulated CPU costs, no flag")
    if h.api_server_count is not None:
        return ["--api-server-count", str(h.api_server_count)]
    if h.tokenizer_workers is not None:
        return ["--tokenizer-worker-num", str(h.tokenizer_workers)]
    if h.postprocess_workers is not None:
        return ["--num_postprocess_workers", str(h.postprocess_workers)]
    return []


def _vllm(cfg: DeploymentConfig, _yaml: str) -> tuple[list[str], list[str], None]:
    e = cfg.engine
    flags = [
        "--tensor-parallel-size", str(cfg.tp),
        "--max-num-seqs", str(e.max_num_seqs),
        "--max-num-batched-tokens", str(e.max_num_batched_tokens),
    ]  # fmt: skip
    notes: list[str] = []
    flags += _parallel(cfg, notes)
    if e.block_size in VLLM_BLOCK_SIZES:
        flags += ["--block-size", str(e.block_size)]
    else:
        notes.append(f"block_size {e.block_size}: not a vLLM --block-size choice; left default")
    flags.append(
        "--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching"
    )
    flags.append(
        "--enable-chunked-prefill" if e.enable_chunked_prefill else "--no-enable-chunked-prefill"
    )
    if not e.enable_chunked_prefill:
        notes.append(
            "without chunked prefill vLLM needs --max-num-batched-tokens >= the "
            "model's context length (--max-model-len)"
        )
    flags += ["--gpu-memory-utilization", _num(e.gpu_memory_utilization)]
    if cfg.dtype == "fp8":
        flags += ["--quantization", "fp8", "--kv-cache-dtype", "fp8"]
        notes.append(
            "dtype fp8 = FP8 weights and KV cache; drop --quantization fp8 for an "
            "FP8 checkpoint (vLLM reads its quantization from the checkpoint)"
        )
    else:
        flags += _quant(cfg, notes, kv_flag=("--kv-cache-dtype", "fp8"))
    sp = cfg.speculative
    if sp is not None and sp.num_speculative_tokens:
        spec: dict[str, Any] = {
            "method": {"mtp": "mtp", "eagle": "eagle", "draft": "draft_model"}[sp.method],
            "num_speculative_tokens": sp.num_speculative_tokens,
        }
        if sp.draft_model is not None:
            spec["model"] = sp.draft_model
        flags += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        if sp.method == "eagle":
            notes.append('speculative eagle: add "model": <the EAGLE head checkpoint>')
    return flags, notes, None


def _sglang(cfg: DeploymentConfig, _yaml: str) -> tuple[list[str], list[str], None]:
    e = cfg.engine
    flags = [
        "--tp-size", str(cfg.tp * cfg.attention_dp),
        "--max-running-requests", str(e.max_num_seqs),
    ]  # fmt: skip
    flags += _parallel(cfg, [])
    if e.max_prefill_tokens is not None:
        flags += ["--max-prefill-tokens", str(e.max_prefill_tokens)]
    if e.enable_chunked_prefill:
        flags += ["--chunked-prefill-size", str(e.max_num_batched_tokens)]
    else:
        flags += ["--chunked-prefill-size", "-1"]
    if e.enable_mixed_chunk:
        flags.append("--enable-mixed-chunk")
    if e.schedule_policy is not None:
        flags += ["--schedule-policy", e.schedule_policy]
    if e.schedule_conservativeness is not None:
        flags += ["--schedule-conservativeness", _num(e.schedule_conservativeness)]
    flags += ["--page-size", str(e.block_size)]
    if not e.enable_prefix_caching:
        flags.append("--disable-radix-cache")
    flags += ["--mem-fraction-static", _num(e.gpu_memory_utilization)]
    notes = [
        "max_num_batched_tokens -> --chunked-prefill-size: SGLang bounds the prefill tokens of "
        "a batch with it (and --max-prefill-tokens, default 16384); decode tokens are not "
        "counted against it unless --enable-mixed-chunk",
        "gpu_memory_utilization -> --mem-fraction-static: SGLang's fraction covers weights and "
        "the KV pool only (activations come out of the rest)",
    ]
    if cfg.dtype == "fp8":
        flags += ["--quantization", "fp8", "--kv-cache-dtype", "fp8_e4m3"]
        notes.append(
            "dtype fp8 = FP8 weights and KV cache; drop --quantization fp8 for an FP8 checkpoint"
        )
    else:
        flags += _quant(cfg, notes, kv_flag=("--kv-cache-dtype", "fp8_e4m3"))
    sp = cfg.speculative
    if sp is not None and sp.num_speculative_tokens:
        k = sp.num_speculative_tokens
        algo = {"mtp": "NEXTN", "eagle": "EAGLE", "draft": "STANDALONE"}[sp.method]
        flags += [
            "--speculative-algorithm", algo, "--speculative-num-steps", str(k),
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(k + 1),
        ]  # fmt: skip
        if sp.draft_model is not None:
            flags += ["--speculative-draft-model-path", sp.draft_model]
        if sp.method == "eagle":
            notes.append("speculative eagle: add --speculative-draft-model-path <EAGLE head>")
    return flags, notes, None


def trtllm_options(cfg: DeploymentConfig) -> dict[str, Any]:
    """The ``--extra_llm_api_options`` YAML content (LLM API fields) as a dict."""
    e = cfg.engine
    kv: dict[str, Any] = {
        "enable_block_reuse": e.enable_prefix_caching,
        "free_gpu_memory_fraction": e.gpu_memory_utilization,
        "tokens_per_block": e.block_size,
    }
    if cfg.kv_dtype == "fp8":
        kv["dtype"] = "fp8"
    out: dict[str, Any] = {
        "enable_chunked_prefill": e.enable_chunked_prefill,
        "kv_cache_config": kv,
    }
    if cfg.attention_dp > 1:  # tp_size counts every GPU; attention runs in DP ranks
        out["enable_attention_dp"] = True
    if cfg.ep > 1 or cfg.moe_tp is not None:
        out["moe_expert_parallel_size"] = cfg.ep
        out["moe_tensor_parallel_size"] = cfg.moe_tp_size
    # LLM API SchedulerConfig (tensorrt_llm/llmapi/llm_args.py); the default is the simulated one
    out["scheduler_config"] = {
        "capacity_scheduler_policy": e.capacity_scheduler_policy or "GUARANTEED_NO_EVICT"
    }
    sp = cfg.speculative
    if sp is not None and sp.num_speculative_tokens and sp.method != "draft":
        k = sp.num_speculative_tokens
        out["speculative_config"] = (
            {"decoding_type": "MTP", "num_nextn_predict_layers": k}
            if sp.method == "mtp"
            else {"decoding_type": "Eagle", "max_draft_len": k}
        )  # LLM API MTPDecodingConfig / EagleDecodingConfig (tensorrt_llm/llmapi/llm_args.py)
    return out


def _trtllm(cfg: DeploymentConfig, yaml_path: str) -> tuple[list[str], list[str], str]:
    import yaml

    e = cfg.engine
    flags = [
        "--backend", "pytorch",
        "--tp_size", str(cfg.tp * cfg.attention_dp),
        "--max_batch_size", str(e.max_num_seqs),
        "--max_num_tokens", str(e.max_num_batched_tokens),
        "--free_gpu_memory_fraction", _num(e.gpu_memory_utilization),
        "--extra_llm_api_options", yaml_path,
    ]  # fmt: skip
    if e.enable_chunked_prefill:
        flags.append("--enable_chunked_prefill")
    notes = [
        "gpu_memory_utilization -> free_gpu_memory_fraction: TRT-LLM takes that fraction of the "
        "memory left after weights and buffers for the KV cache (vLLM: of the whole GPU)",
        "the YAML overrides the flags it repeats; block_size -> kv_cache_config.tokens_per_block, "
        "enable_prefix_caching -> kv_cache_config.enable_block_reuse",
    ]
    if cfg.dtype == "fp8":
        notes.append(
            "dtype fp8: serve an FP8 checkpoint (TensorRT Model Optimizer); TRT-LLM "
            "reads weight quantization from it, the YAML sets the FP8 KV cache"
        )
    else:
        _quant(cfg, notes, kv_flag=None)
    text = yaml.safe_dump(trtllm_options(cfg), sort_keys=False)
    return flags, notes, text


_ENGINE_FLAGS = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}


# --------------------------------------------------------------------------- router
def _frontend(cfg: DeploymentConfig, block_size: int) -> tuple[Command, list[str]]:
    """``python -m dynamo.frontend`` with the deployment's ``router``, and notes on it."""
    mode = _ROUTER_MODES[cfg.router]
    argv = ["python", "-m", "dynamo.frontend", "--http-port", str(FRONTEND_PORT),
            "--router-mode", mode]  # fmt: skip
    notes = []
    if cfg.router in ("kv_aware", "kv_load"):
        kv = cfg.kv_router
        weight = kv.overlap_weight if cfg.router == "kv_aware" else 0.0
        argv += ["--router-kv-overlap-score-weight", _num(weight),
                 "--router-temperature", _num(kv.temperature),
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
        flags, _, _ = _vllm(cfg, yaml_path)
        return ["python", "-m", "dynamo.vllm", "--model", cfg.model, *flags]
    if cfg.backend == "sglang":
        flags, _, _ = _sglang(cfg, yaml_path)
        return ["python", "-m", "dynamo.sglang", "--model-path", cfg.model, *flags]
    e = cfg.engine
    worker = ["python", "-m", "dynamo.trtllm", "--model", cfg.model,
              "--tensor-parallel-size", str(cfg.tp * cfg.attention_dp),
              "--max-batch-size", str(e.max_num_seqs),
              "--max-num-tokens", str(e.max_num_batched_tokens),
              "--kv-block-size", str(e.block_size),
              "--free-gpu-memory-fraction", _num(e.gpu_memory_utilization),
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
    commands += [Command(tuple(worker), _devices(cfg, r)) for r in range(cfg.workers)]
    mode = _ROUTER_MODES[cfg.router]
    title = f"router: NVIDIA Dynamo frontend ({mode}) in front of {cfg.workers} workers"
    return Part(title, tuple(commands), tuple(notes))


# --------------------------------------------------------------------------- disaggregated
def _placements(cfg: DeploymentConfig) -> list[tuple[str, PoolConfig, list[int]]]:
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
    commands = tuple(Command(tuple(argv), _gpu_env(f, pool.tp)) for f in firsts)
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


# --------------------------------------------------------------------------- AIPerf
def _goodput(cfg: DeploymentConfig) -> str | None:
    pairs = [("time_to_first_token", cfg.slo.ttft_ms), ("inter_token_latency", cfg.slo.itl_ms),
             ("request_latency", cfg.slo.e2e_ms)]  # fmt: skip
    text = " ".join(f"{tag}:{v:g}" for tag, v in pairs if v is not None)
    return text or None


def _load(
    study: Mapping[str, Any], workload: Mapping[str, Any], trial: TrialInfo
) -> tuple[str | None, float | None]:
    """``(axis, load_level)``; the axis is ``load.axis`` or follows from the workload.

    As in ``search.load``: a trace (or a workload file naming one) is replayed faster
    (``speedup``), an open-loop synthetic workload gets another ``rate_rps``, a closed-loop one
    another ``concurrency``.
    """
    raw = study.get("load")
    load = raw if isinstance(raw, Mapping) else {}
    axis = load.get("axis")
    if not axis and "trace" in workload:
        axis = "speedup"
    elif not axis and "file" in workload:
        arrival = workload.get("_arrival")
        process = arrival.get("process") if isinstance(arrival, Mapping) else None
        axis = {None: None, "closed_loop": "concurrency"}.get(process, "rate_rps")
    level = trial.metrics.get("load_level")
    if level is None or not math.isfinite(level) or level <= 0:
        return (str(axis) if axis else None), None
    return (str(axis) if axis else None), float(level)


def aiperf_part(
    cfg: DeploymentConfig,
    study: Mapping[str, Any],
    trial: TrialInfo,
    spec: Mapping[str, Any] | None,
    spec_error: str | None,
) -> Part:
    """``aiperf profile`` at the load the trial's metrics were simulated at."""
    argv = ["aiperf", "profile", "--model", cfg.model, "--url", f"localhost:{FRONTEND_PORT}",
            "--endpoint-type", "chat", "--streaming"]  # fmt: skip
    notes: list[str] = []
    raw_workload = study.get("workload")
    workload: Mapping[str, Any] = raw_workload if isinstance(raw_workload, Mapping) else {}
    if "file" in workload and spec is not None and "trace" in spec:  # a file naming a trace
        folder = Path(str(workload["file"])).parent
        ref = {k: spec[k] for k in ("speedup", "max_requests", "warmup_requests") if k in spec}
        if "warmup_requests" in workload:
            ref["warmup_requests"] = workload["warmup_requests"]
        workload = {**ref, "trace": str(folder / str(spec["trace"]))}
    elif "file" in workload and spec is not None:
        workload = {**workload, "_arrival": spec.get("arrival")}
    axis, level = _load(study, workload, trial)
    raw_load = study.get("load")
    mode = raw_load.get("mode", "fixed") if isinstance(raw_load, Mapping) else "fixed"
    if mode != "fixed" and level is None:
        notes.append(
            f"load mode {mode} but the trial records no load_level: the workload's own load is used"
        )
    if "trace" in workload:
        _trace_load(argv, notes, workload, axis, level)
    elif "file" in workload:
        _synthetic_load(argv, notes, workload, spec, spec_error, axis, level)
    else:
        notes.append("the study stores no workload: set the load and ISL/OSL by hand")
        if axis == "concurrency" and level is not None:
            argv += ["--concurrency", str(round(level))]
        elif axis == "rate_rps" and level is not None:
            argv += ["--request-rate", _num(level)]
    goodput = _goodput(cfg)
    if goodput:
        argv += ["--goodput", goodput]
        notes.append(
            "--goodput: the deployment's per-request SLOs (ms); the study's constraints "
            "are percentiles: compare them with AIPerf's reported p50/p90/p99"
        )
    argv += ["--output-artifact-dir", f"artifacts/{_slug(trial.study_name)}-trial{trial.number}"]
    if cfg.mode == "agg" and cfg.workers > 1:
        notes.append(
            f"--url is the Dynamo frontend; without Dynamo, round-robin over the "
            f"standalone replicas with one --url localhost:PORT per replica "
            f"(ports {FRONTEND_PORT + 1}-{FRONTEND_PORT + cfg.workers})"
        )
    title = "check: AIPerf at the study's load" + (f" ({axis} = {level:g})" if level else "")
    return Part(title, (Command(tuple(argv)),), tuple(notes))


def _trace_load(
    argv: list[str],
    notes: list[str],
    workload: Mapping[str, Any],
    axis: str | None,
    level: float | None,
) -> None:
    path = str(workload["trace"])
    if path.endswith((".jsonl", ".json")):
        argv += ["--input-file", path, "--custom-dataset-type", "mooncake_trace"]
    else:
        mooncake = str(Path(path).with_suffix(".jsonl"))
        argv += ["--input-file", mooncake, "--custom-dataset-type", "mooncake_trace"]
        notes.append(
            f"AIPerf replays Mooncake JSONL: convert {path} to {mooncake} (timestamp "
            "ms, input_length, output_length[, hash_ids])"
        )
    speed = float(workload.get("speedup", 1.0) or 1.0)
    if axis == "speedup" and level is not None:
        if speed != 1.0 and speed != level:
            notes.append(f"load_level {level:g} replaces the workload's speedup {speed:g}")
        speed = level
    if axis in ("rate_rps", "concurrency") and level is not None:
        flag = "--request-rate" if axis == "rate_rps" else "--concurrency"
        value = _num(level) if axis == "rate_rps" else str(round(level))
        argv += ["--no-fixed-schedule", flag, value]
        notes.append(f"the trace's requests are sent at {flag} {value} instead of its timestamps")
    else:
        argv.append("--fixed-schedule")
        if speed != 1.0:
            argv += ["--synthesis-speedup-ratio", _num(speed)]
            notes.append(
                f"replayed {speed:g}x faster: AIPerf 0.13 divides the timestamps by "
                "--synthesis-speedup-ratio (its synthesizer may renumber hash_ids, "
                "keeping their sharing); later AIPerf: --fixed-schedule-speedup"
            )
    if workload.get("max_requests"):
        argv += ["--request-count", str(int(workload["max_requests"]))]
    if workload.get("warmup_requests"):
        notes.append(
            f"warmup_requests {workload['warmup_requests']}: dynosim drops the first "
            "completed requests from its metrics; AIPerf has no such filter for a fixed "
            "schedule (its --warmup-request-count sends extra requests first)"
        )


def _synthetic_load(
    argv: list[str],
    notes: list[str],
    workload: Mapping[str, Any],
    spec: Mapping[str, Any] | None,
    spec_error: str | None,
    axis: str | None,
    level: float | None,
) -> None:
    if spec is None:
        why = f" ({spec_error})" if spec_error else ""
        notes.append(
            f"workload file {workload.get('file')} not readable{why}: set the arrival "
            "process and --isl/--osl by hand"
        )
        spec = {}
    raw_arrival = spec.get("arrival")
    arrival = raw_arrival if isinstance(raw_arrival, Mapping) else {}
    process = arrival.get("process")
    if axis == "concurrency" and level is not None:
        process, arrival = "closed_loop", {**arrival, "concurrency": round(level)}
    elif axis == "rate_rps" and level is not None and process != "closed_loop":
        arrival = {**arrival, "rate_rps": level}
    elif axis == "speedup" and level is not None and "rate_rps" in arrival:
        arrival = {**arrival, "rate_rps": float(arrival["rate_rps"]) * level}
        notes.append(f"speed-up {level:g} of the generated arrivals = rate x {level:g}")
    if process == "closed_loop":
        argv += ["--concurrency", str(int(arrival.get("concurrency", 1)))]
        ramp = float(arrival.get("ramp_up_s", 0) or 0)
        if ramp > 0:
            argv += ["--concurrency-ramp-duration", _num(ramp)]
    elif process in ("poisson", "constant", "gamma"):
        argv += ["--request-rate", _num(float(arrival.get("rate_rps", 1.0))),
                 "--arrival-pattern", str(process)]  # fmt: skip
        if process == "gamma":
            cv = float(arrival.get("cv", 1.0))
            argv += ["--arrival-smoothness", f"{1.0 / cv**2:.6g}"]
    if spec.get("requests"):
        argv += ["--request-count", str(int(spec["requests"]))]
    warmup = workload.get("warmup_requests", spec.get("warmup_requests"))
    if warmup:
        argv += ["--warmup-request-count", str(int(warmup))]
    for name, flag in (("input_tokens", "--isl"), ("output_tokens", "--osl")):
        _lengths(argv, notes, spec.get(name), name, flag)
    if isinstance(spec.get("output_tokens"), Mapping):
        argv += ["--extra-inputs", "ignore_eos:true"]
        notes.append(
            "ignore_eos:true makes outputs as long as --osl asks (an engine extension "
            "of the OpenAI API)"
        )
    _prefix_sessions(argv, notes, spec)
    if isinstance(spec.get("seed"), int):
        argv += ["--random-seed", str(spec["seed"])]


def _lengths(argv: list[str], notes: list[str], dist: object, name: str, flag: str) -> None:
    if not isinstance(dist, Mapping):
        return
    kind = dist.get("dist")
    if kind == "fixed":
        mean, std = float(dist.get("value", 1)), 0.0
    elif kind == "uniform":
        low, high = float(dist.get("low", 1)), float(dist.get("high", 1))
        mean, std = (low + high) / 2, (high - low) / math.sqrt(12)
        notes.append(f"{name} uniform [{low:g}, {high:g}] -> normal with its mean and stddev")
    elif kind == "lognormal":
        mean, sigma = float(dist.get("mean", 1)), float(dist.get("sigma", 0))
        std = mean * math.sqrt(math.expm1(sigma**2))
        notes.append(f"{name} lognormal -> normal with the same mean and stddev (AIPerf draws "
                     "normal lengths)" + (f"; no cap at max {dist['max']}" if dist.get("max")
                                          else ""))  # fmt: skip
    else:
        notes.append(f"{name} {kind}: no AIPerf equivalent; set {flag} by hand")
        return
    argv += [flag, str(round(mean)), f"{flag}-stddev", _num(round(std, 3))]


def _prefix_sessions(argv: list[str], notes: list[str], spec: Mapping[str, Any]) -> None:
    prefix = spec.get("prefix")
    if isinstance(prefix, Mapping):
        argv += ["--num-prefix-prompts", str(int(prefix.get("groups", 1))),
                 "--prefix-prompt-length", str(int(prefix.get("tokens", 0)))]  # fmt: skip
        if prefix.get("zipf_s"):
            notes.append("prefix zipf_s: AIPerf picks prefixes uniformly; no Zipf equivalent")
    sessions = spec.get("sessions")
    if isinstance(sessions, Mapping):
        argv += ["--session-turns-mean", str(int(sessions.get("turns", 1))),
                 "--session-turn-delay-mean",
                 _num(1000.0 * float(sessions.get("think_time_s", 0.0)))]  # fmt: skip
        notes.append(
            "sessions: dynosim resends the whole history each turn; check that "
            "AIPerf's multi-turn prompts grow the same way"
        )


def trial_metrics(raw: object) -> dict[str, float]:
    """The numeric entries of a trial's ``metrics`` user attribute."""
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, int | float)}
