"""Each benchmark tool's latency figures, computed from simulated per-request records.

The tools measure the same requests differently (client-side, in ms, over the measured requests:
completed ones after the warm-ups):

* ``inferencex`` and ``vllm-bench`` (vLLM's ``benchmark_serving.py``): ``mean_ttft_ms`` (and
  median, p99) over requests; ``mean_tpot_ms``: the mean over requests with more than one output
  token of ``(latency - ttft) / (output_tokens - 1)`` (InferenceX reports this as TPOT);
  ``mean_itl_ms``: the mean over every inter-token gap of every request, i.e. token-weighted,
  ``sum(latency - ttft) / sum(output_tokens - 1)`` when each token streams as its own chunk;
  ``output_throughput``: output tokens over the run (first measured send to last completion).
* ``aiperf``: ``time_to_first_token`` and ``inter_token_latency`` (per request
  ``(latency - ttft) / (output_tokens - 1)``) as avg/p50/p90/p99, and
  ``output_token_throughput`` — the simulator's own definitions (``dynosim.metrics``).

With a single token per request and a uniform batch the two ITL figures agree; they part when
long and short outputs mix (the token-weighted one leans to the long requests).
"""

from __future__ import annotations

import numpy as np

from dynosim.metrics import RequestRecords, measured
from dynosim.perf.calibration import HostCalibration
from dynosim.workload.client import ClientName


def client_metrics(
    records: RequestRecords,
    client: ClientName,
    warmup: int,
    host: HostCalibration | None = None,
) -> dict[str, float]:
    """The figures ``client`` would print for this run (see the module docstring).

    ``host``: a per-request host delay (``request_us + input_token_us * input tokens``) the
    simulation did not model, added to each measured request's first token and completion
    (TTFT and latency grow by it, TPOT does not change).
    """
    idx = measured(records, warmup)
    nan = float("nan")
    if idx.size == 0:
        return {}
    arrival = records.arrival_us[idx].astype(np.float64)
    first = records.first_token_us[idx].astype(np.float64)
    finish = records.finish_us[idx].astype(np.float64)
    if host is not None:
        delay = host.request_us + host.input_token_us * records.input_tokens[idx]
        first = first + delay
        finish = finish + delay
    osl = records.output_tokens[idx]
    ttft = (first - arrival) / 1e3
    decode_ms = (finish - first) / 1e3
    multi = osl > 1
    tpot = decode_ms[multi] / (osl[multi] - 1)
    span_s = (finish.max() - arrival.min()) / 1e6
    throughput = float(osl.sum()) / span_s if span_s > 0 else nan
    if client == "aiperf":
        out = {"output_token_throughput": throughput}
        for name, values in (("time_to_first_token", ttft), ("inter_token_latency", tpot),
                             ("request_latency", (finish - arrival) / 1e3)):  # fmt: skip
            p50, p90, p99 = np.percentile(values, [50, 90, 99]) if values.size else (nan,) * 3
            out |= {f"{name}.avg": float(values.mean()) if values.size else nan,
                    f"{name}.p50": float(p50), f"{name}.p90": float(p90),
                    f"{name}.p99": float(p99)}  # fmt: skip
        return out
    gaps = float((osl[multi] - 1).sum())
    return {
        "mean_ttft_ms": float(ttft.mean()),
        "median_ttft_ms": float(np.median(ttft)),
        "p99_ttft_ms": float(np.percentile(ttft, 99)),
        "mean_tpot_ms": float(tpot.mean()) if tpot.size else nan,
        "median_tpot_ms": float(np.median(tpot)) if tpot.size else nan,
        "mean_itl_ms": float(decode_ms[multi].sum()) / gaps if gaps else nan,
        "mean_e2el_ms": float(((finish - arrival) / 1e3).mean()),
        "output_throughput": throughput,
        "request_throughput": idx.size / span_s if span_s > 0 else nan,
    }
