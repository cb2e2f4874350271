"""The AIPerf command that checks a trial at the load its metrics were simulated at.

Flag names were checked against this source (read for facts, no code copied):

* AIPerf: the ``aiperf`` 0.13.0 wheel, ``aiperf/config/flags/cli_config.py`` (``profile``:
  ``--concurrency``, ``--request-rate``, ``--arrival-pattern`` constant | poisson | gamma,
  ``--arrival-smoothness`` = gamma shape = 1/CV², ``--isl``/``--osl`` with stddevs,
  ``--input-file --custom-dataset-type mooncake_trace --fixed-schedule``, ``--no-fixed-schedule``,
  ``--synthesis-speedup-ratio`` (trace timestamps divided by it), ``--goodput "tag:value ..."``
  with the tags of ``aiperf/metrics/types/*.py``). 0.13.0 has no ``--fixed-schedule-speedup``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.export.parts import FRONTEND_PORT, Command, Part, TrialInfo, num, slug
from search.export.quant import served_model

if TYPE_CHECKING:
    from dynosim.config import DeploymentConfig


def _goodput(cfg: DeploymentConfig) -> str | None:
    pairs = [("time_to_first_token", cfg.slo.ttft_ms), ("inter_token_latency", cfg.slo.itl_ms),
             ("request_latency", cfg.slo.e2e_ms)]  # fmt: skip
    text = " ".join(f"{tag}:{v:g}" for tag, v in pairs if v is not None)
    return text or None


def _load(
    study: Mapping[str, Any], workload: Mapping[str, Any], trial: TrialInfo
) -> tuple[str | None, float | None]:
    """``(axis, load_level)``; the axis is ``load.axis`` or follows from the workload.

    As in ``search.study.load``: a trace (or a workload file naming one) is replayed faster
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
    *,
    trace_file: str | None = None,
    title: str = "check: AIPerf at the study's load",
    own_load: bool = False,
    artifacts: str = "",
) -> Part:
    """``aiperf profile`` at the trial's ``load_level`` (the load its metrics were simulated at).

    ``trace_file``: the workload written as AIPerf's Mooncake JSONL (``--aiperf-trace``), at
    its own load; it replaces the study's workload. ``own_load``: the trial's metrics were
    stripped of ``load_level`` on purpose (the check runs at the workload's own load).
    ``artifacts``: a suffix of the output folder, so that two checks do not share one.
    """
    argv = ["aiperf", "profile", "--model", served_model(cfg),
            "--url", f"localhost:{FRONTEND_PORT}", "--endpoint-type", "chat",
            "--streaming"]  # fmt: skip
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
    if trace_file is not None:  # the same requests, as AIPerf reads them
        kept = {k: workload[k] for k in ("warmup_requests",) if k in workload}
        workload = {**kept, "trace": trace_file}
    raw_load = study.get("load")
    mode = raw_load.get("mode", "fixed") if isinstance(raw_load, Mapping) else "fixed"
    if mode != "fixed" and level is None and not own_load:
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
            argv += ["--request-rate", num(level)]
    goodput = _goodput(cfg)
    if goodput:
        argv += ["--goodput", goodput]
        notes.append(
            "--goodput: the deployment's per-request SLOs (ms); the study's constraints "
            "are percentiles: compare them with AIPerf's reported p50/p90/p99"
        )
    artifact_dir = f"artifacts/{slug(trial.study_name)}-trial{trial.number}{artifacts}"
    argv += ["--output-artifact-dir", artifact_dir]
    if cfg.mode == "agg" and cfg.workers > 1:
        notes.append(
            f"--url is the Dynamo frontend; without Dynamo, round-robin over the "
            f"standalone replicas with one --url localhost:PORT per replica "
            f"(ports {FRONTEND_PORT + 1}-{FRONTEND_PORT + cfg.workers})"
        )
    title += f" ({axis} = {level:g})" if level else " (the workload as written)"
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
            f"AIPerf replays Mooncake JSONL: write {mooncake} with `dynosim export ... "
            f"--aiperf-trace {mooncake}`"
        )
    speed = float(workload.get("speedup", 1.0) or 1.0)
    if axis == "speedup" and level is not None:
        if speed not in (1.0, level):
            notes.append(f"load_level {level:g} replaces the workload's speedup {speed:g}")
        speed = level
    if axis in ("rate_rps", "concurrency") and level is not None:
        flag = "--request-rate" if axis == "rate_rps" else "--concurrency"
        value = num(level) if axis == "rate_rps" else str(round(level))
        argv += ["--no-fixed-schedule", flag, value]
        notes.append(f"the trace's requests are sent at {flag} {value} instead of its timestamps")
    else:
        argv.append("--fixed-schedule")
        if speed != 1.0:
            argv += ["--synthesis-speedup-ratio", num(speed)]
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
            argv += ["--concurrency-ramp-duration", num(ramp)]
    elif process in ("poisson", "constant", "gamma"):
        argv += ["--request-rate", num(float(arrival.get("rate_rps", 1.0))),
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
    argv += [flag, str(round(mean)), f"{flag}-stddev", num(round(std, 3))]


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
                 num(1000.0 * float(sessions.get("think_time_s", 0.0)))]  # fmt: skip
        notes.append(
            "sessions: dynosim resends the whole history each turn; check that "
            "AIPerf's multi-turn prompts grow the same way"
        )
