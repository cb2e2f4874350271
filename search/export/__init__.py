"""A stored trial -> the launch commands of its backend and an AIPerf command that checks it.

Pure functions: a trial's ``DeploymentConfig.to_dict()``, the stored study dict (``study``
user attribute) and the trial's metrics go in; an :class:`Export` of commands, notes and the
TRT-LLM YAML comes out. No file is read or written here (``search.cli.study.export`` does I/O).
Only knobs with a real equivalent are mapped; every other knob becomes a ``#`` note.


The modules, each naming the engine and tool sources its flags were checked against:
:mod:`search.export.engines` (vLLM, SGLang, TensorRT-LLM servers), :mod:`search.export.dynamo`
(Dynamo's frontend, disaggregated pools and planner), :mod:`search.export.aiperf` (the check)
and the leaf :mod:`search.export.parts` (:class:`Command`, :class:`Part`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dynosim.config import DeploymentConfig
from dynosim.errors import DynosimError
from search.export.aiperf import aiperf_part
from search.export.dynamo import (
    frontend_part,
    placements,
    planner_part,
    pool_part,
    router_part,
)
from search.export.engines import VLLM_BLOCK_SIZES, engine_part, trtllm_options
from search.export.parts import FRONTEND_PORT, Command, Part, TrialInfo, slug
from search.export.quant import checkpoint_part

__all__ = [
    "FRONTEND_PORT",
    "VLLM_BLOCK_SIZES",
    "Command",
    "Export",
    "Part",
    "TrialInfo",
    "aiperf_part",
    "engine_part",
    "export_trial",
    "frontend_part",
    "planner_part",
    "pool_part",
    "router_part",
    "trial_metrics",
    "trtllm_options",
]


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
    checkpoint: Part | None = None
    capacity_check: Part | None = None

    def yaml_files(self) -> tuple[tuple[str, str], ...]:
        """Every TRT-LLM YAML the commands name, as ``(path, text)``."""
        path, text = self.trtllm_yaml_path, self.trtllm_yaml
        own = ((path, text),) if path is not None and text is not None else ()
        return (*own, *self.pool_yamls)

    def to_text(self) -> str:
        """Plain text: ``#`` comments and commands, blank lines between the parts."""
        lines = [f"# {h}" for h in self.header]
        parts = [*([self.checkpoint] if self.checkpoint else []), self.engine]
        parts += [*([self.router] if self.router else []), *self.pools]
        parts += [*([self.planner] if self.planner else []), self.aiperf]
        parts += [self.capacity_check] if self.capacity_check else []
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
            "checkpoint": self.checkpoint.to_dict() if self.checkpoint else None,
            "engine": self.engine.to_dict(),
            "router": self.router.to_dict() if self.router else None,
            "pools": [p.to_dict() for p in self.pools],
            "planner": self.planner.to_dict() if self.planner else None,
            "trtllm_yaml": self.trtllm_yaml,
            "trtllm_yaml_path": self.trtllm_yaml_path,
            "pool_yamls": [{"path": path, "yaml": text} for path, text in self.pool_yamls],
            "aiperf": self.aiperf.to_dict(),
            "capacity_check": self.capacity_check.to_dict() if self.capacity_check else None,
            "files": list(self.files),
        }


def export_trial(
    config: Mapping[str, Any],
    study: Mapping[str, Any],
    trial: TrialInfo,
    *,
    workload_spec: Mapping[str, Any] | None = None,
    workload_error: str | None = None,
    yaml_dir: str | Path = ".",
    load: float | None = None,
    trace_file: str | None = None,
) -> Export:
    """The launch commands and the AIPerf check of one stored trial.

    Args:
        config: The trial's ``config`` user attribute (``DeploymentConfig.to_dict()``).
        study: The stored study dict (may be empty: the load is then unknown).
        trial: Name, number, feasibility and metrics of the trial.
        workload_spec: The parsed synthetic workload file when the study uses ``{file: ...}``.
        workload_error: Why that file could not be read, if it could not.
        yaml_dir: Folder the TRT-LLM YAML is (to be) written to; the command names it.
        load: The load level of the AIPerf check on the study's load axis (``--load``);
            default the trial's own (a capacity study's: the workload as written, and a
            second check at the trial's capacity).
        trace_file: The workload written as AIPerf's Mooncake JSONL (``--aiperf-trace``).

    Raises:
        DynosimError: The stored configuration is not a valid deployment.
    """
    try:
        cfg = DeploymentConfig.from_dict(config)
    except DynosimError as exc:
        raise DynosimError(
            f"trial #{trial.number} has no exportable configuration: {exc}"
        ) from None
    yaml_stem = str(Path(yaml_dir) / f"trtllm-{slug(trial.study_name)}-trial{trial.number}")
    aiperf, capacity = _checks(cfg, study, trial, workload_spec, workload_error, load, trace_file)
    planner = planner_part(cfg) if cfg.planner is not None else None
    if cfg.mode == "disagg":
        pools, yamls = [], []
        for name, pool, first in placements(cfg):
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
            checkpoint=checkpoint_part(cfg),
            capacity_check=capacity,
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
        checkpoint=checkpoint_part(cfg),
        capacity_check=capacity,
    )


def _checks(
    cfg: DeploymentConfig,
    study: Mapping[str, Any],
    trial: TrialInfo,
    spec: Mapping[str, Any] | None,
    spec_error: str | None,
    load: float | None,
    trace_file: str | None,
) -> tuple[Part, Part | None]:
    """The AIPerf check at the chosen load, and (capacity studies) the one at capacity."""
    raw = study.get("load")
    mode = raw.get("mode", "fixed") if isinstance(raw, Mapping) else "fixed"
    metrics = {k: v for k, v in trial.metrics.items() if k != "load_level"}
    trial_level = trial.metrics.get("load_level")
    if load is not None:
        at, title = {**metrics, "load_level": load}, "check: AIPerf at the chosen load"
    elif mode == "capacity":
        at, title = metrics, "check: AIPerf at the study's load"
    else:
        at, title = dict(trial.metrics), "check: AIPerf at the study's load"
    main = aiperf_part(cfg, study, replace(trial, metrics=at), spec, spec_error,
                       trace_file=trace_file, title=title,
                       own_load=load is None and mode == "capacity")  # fmt: skip
    if mode == "capacity" and trial_level is None:
        why = "the trial records no load_level (its capacity): no check at capacity"
        return replace(main, notes=(*main.notes, why)), None
    if mode != "capacity":
        return main, None
    capacity = aiperf_part(cfg, study, trial, spec, spec_error, trace_file=trace_file,
                           title="check: AIPerf at the trial's capacity",
                           artifacts="-capacity")  # fmt: skip
    return main, capacity


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


def trial_metrics(raw: object) -> dict[str, float]:
    """The numeric entries of a trial's ``metrics`` user attribute."""
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, int | float)}
