"""Backend schedulers at capacity on the Mooncake conversation trace: run, write CSV, print.

Two questions, one table each (``results.csv``, Markdown on stdout):

* ``own``: each backend as the simulator serves it by default, i.e. its scheduling policy
  *and* AIConfigurator's kernel data and the calibrated framework overhead of that backend: the
  study ``conversation.yaml`` (5 grid points: vllm; sglang alternating / mixed; trtllm
  GUARANTEED_NO_EVICT / MAX_UTILIZATION), run through the project's study driver as
  ``dynosim tune`` runs it;
* ``policy``: the same five policies with one performance model for all (vLLM's kernels and
  overhead), so that the difference is the scheduler alone;
* ``policy kv-bound``: the same on a workload where the KV cache is the limit (2 workers with
  ``gpu_memory_utilization: 0.3``, Poisson arrivals, lognormal prompts of 2,048 and outputs of
  1,536 tokens on average), capacity on the arrival rate.

Capacity is the highest trace speed-up on a 5% grid at which TTFT p90 <= 2 s and ITL p90 <=
50 ms hold (``search.run.capacity.find_capacity``, as the studies search it). Run from anywhere::

    .venv/bin/python experiments/2026-12-schedulers/run.py            # ~10 min on 2 cores
    .venv/bin/python experiments/2026-12-schedulers/run.py --max-requests 400   # smoke, ~1 min
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dynosim import DeploymentConfig, Simulation  # noqa: E402
from dynosim.perf.deployment import resolve  # noqa: E402
from dynosim.workload import ArrivalSpec, LengthSpec, WorkloadSpec, generate  # noqa: E402
from search.run.capacity import Probe, find_capacity  # noqa: E402
from search.run.driver import run_study  # noqa: E402
from search.store.open import open_storage  # noqa: E402
from search.study.load import LoadAxis, LoadSpec  # noqa: E402
from search.study.study_file import load_study_file  # noqa: E402
from search.study.workload import load_workload  # noqa: E402

POLICIES: dict[str, dict[str, Any]] = {
    "vllm": {"backend": "vllm"},
    "sglang": {"backend": "sglang", "engine": {"enable_mixed_chunk": False}},
    "sglang mixed": {"backend": "sglang", "engine": {"enable_mixed_chunk": True}},
    "trtllm no-evict": {
        "backend": "trtllm", "engine": {"capacity_scheduler_policy": "GUARANTEED_NO_EVICT"}},
    "trtllm max-util": {
        "backend": "trtllm", "engine": {"capacity_scheduler_policy": "MAX_UTILIZATION"}},
}  # fmt: skip
FIELDS = ("question", "policy", "capacity_rps", "speedup", "ttft_p90_ms", "itl_p90_ms",
          "tokens_per_s_per_gpu", "preemptions", "probes")  # fmt: skip
TTFT_P90_MS, ITL_P90_MS = 2000.0, 50.0


def _policy_of(params: dict[str, Any]) -> str:
    backend = params["backend"]
    if backend == "sglang":
        return "sglang mixed" if params.get("engine.enable_mixed_chunk") else "sglang"
    if backend == "trtllm":
        no_evict = params.get("engine.capacity_scheduler_policy") == "GUARANTEED_NO_EVICT"
        return "trtllm no-evict" if no_evict else "trtllm max-util"
    return "vllm"


def own(max_requests: int | None, storage: Path) -> list[dict[str, Any]]:
    """The study: each backend with its own kernels, overhead and scheduler."""
    import optuna

    storage.parent.mkdir(parents=True, exist_ok=True)
    storage.unlink(missing_ok=True)
    sf = load_study_file(
        HERE / "conversation.yaml",
        {"storage": str(storage), "workload.max_requests": max_requests},
    )
    requests, warmup, name = load_workload(sf.workload, sf.load)
    run_study(sf, requests, warmup_requests=warmup, workload_name=name)
    study = optuna.load_study(study_name=sf.name, storage=open_storage(sf.storage, create=False))
    rows = []
    for t in study.trials:
        m = t.user_attrs.get("metrics", {})
        rows.append({
            "question": "own", "policy": _policy_of(t.params),
            "capacity_rps": m.get("capacity_rps"), "speedup": m.get("load_level"),
            "ttft_p90_ms": m.get("time_to_first_token.p90"),
            "itl_p90_ms": m.get("inter_token_latency.p90"),
            "tokens_per_s_per_gpu": m.get("output_token_throughput_per_gpu"),
            "preemptions": m.get("preemptions"), "probes": m.get("capacity_probes"),
        })  # fmt: skip
    return rows


KV_BOUND = WorkloadSpec(
    requests=2000,
    arrival=ArrivalSpec(process="poisson", rate_rps=2.0),
    input_tokens=LengthSpec(dist="lognormal", mean=2048, sigma=0.5),
    output_tokens=LengthSpec(dist="lognormal", mean=1536, sigma=0.5),
    seed=0,
    name="kv-bound",
)
"""Long outputs on a small KV pool (gpu_memory_utilization 0.3, 2 workers): KV is the limit."""


def policy(max_requests: int | None, *, kv_bound: bool = False) -> list[dict[str, Any]]:
    """The five policies with vLLM's performance model for all.

    ``kv_bound``: on :data:`KV_BOUND` (a rate sweep) with 2 workers whose KV pool is small,
    instead of the trace with 8 workers.
    """
    sf = load_study_file(HERE / "conversation.yaml", {"workload.max_requests": max_requests})
    base: dict[str, Any] = json.loads(json.dumps(dict(sf.problem.base)))
    requests: Sequence[Any]
    if kv_bound:
        spec_w = KV_BOUND if max_requests is None else replace(KV_BOUND, requests=max_requests)
        requests = generate(spec_w)
        warmup = 100 if max_requests is None else 0
        axis = LoadAxis("rate_rps", spec_w.arrival.rate_rps, spec_w)
        base["workers"] = 2
        base["engine"] = dict(base.get("engine", {})) | {"gpu_memory_utilization": 0.3}
    else:
        requests, warmup, _ = load_workload(sf.workload, sf.load)
        axis = LoadAxis("speedup", 1.0)
    question = "policy kv-bound" if kv_bound else "policy"
    perf = resolve(DeploymentConfig.from_dict(base | {"backend": "vllm"}))
    spec = LoadSpec(mode="capacity", tolerance=0.05)
    rows = []
    for name, fields in POLICIES.items():
        data = base | fields
        data["engine"] = dict(base.get("engine", {})) | fields.get("engine", {})
        cfg = DeploymentConfig.from_dict(data)

        def probe(level: float, cfg: DeploymentConfig = cfg) -> Probe:
            reqs, speedup = axis.workload_at(level, requests)
            res = Simulation(cfg, reqs, perf=perf, speedup=speedup).run(warmup_requests=warmup)
            m = res.metrics
            ok = (m.time_to_first_token.p90 <= TTFT_P90_MS
                  and m.inter_token_latency.p90 <= ITL_P90_MS)  # fmt: skip
            flat = m.flat() | {"load_level": level}
            return Probe(level, flat, ok, len(reqs))

        t0 = time.perf_counter()
        found = find_capacity(probe, axis, spec)
        best = found.best
        m = best.metrics if best is not None else {}
        rows.append({
            "question": question, "policy": name,
            "capacity_rps": m.get("request_throughput"), "speedup": found.level,
            "ttft_p90_ms": m.get("time_to_first_token.p90"),
            "itl_p90_ms": m.get("inter_token_latency.p90"),
            "tokens_per_s_per_gpu": m.get("output_token_throughput_per_gpu"),
            "preemptions": m.get("preemptions"), "probes": len(found.probes),
        })  # fmt: skip
        print(f"  policy {name}: {time.perf_counter() - t0:.0f} s", flush=True)
    return rows


def _fmt(v: object, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def main(argv: Sequence[str] | None = None) -> int:
    """Run both questions, write ``results.csv`` and print Markdown tables."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--max-requests", type=int, default=None, help="first N trace requests")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--storage", type=Path, default=ROOT / "runs/schedulers/schedulers.journal")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = own(args.max_requests, args.storage) + policy(args.max_requests)
    rows += policy(args.max_requests, kv_bound=True)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "results.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    for question in ("own", "policy", "policy kv-bound"):
        print(f"\n{question}:\n")
        print("| policy | capacity req/s | load level | TTFT p90 ms | ITL p90 ms | tok/s/GPU "
              "| preemptions |")  # fmt: skip
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if r["question"] == question:
                cells = (r["policy"], _fmt(r["capacity_rps"], 2), _fmt(r["speedup"], 3),
                         _fmt(r["ttft_p90_ms"], 0), _fmt(r["itl_p90_ms"]),
                         _fmt(r["tokens_per_s_per_gpu"], 0), _fmt(r["preemptions"], 0))  # fmt: skip
                print("| " + " | ".join(cells) + " |")
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
