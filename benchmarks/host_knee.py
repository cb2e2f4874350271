"""Where the host processes saturate: TTFT and ITL against load for 1, 2 and 4 processes.

One engine replica (``--model`` on one ``--gpu``, vLLM, AIConfigurator step times) serves a
Poisson workload (lognormal lengths, ``--isl``/``--osl`` means, sigma 0.6) at a sweep of
rates. Each rate runs with no host model (the engine alone), with the host's costs as pure
delays (unbounded processes), and with 1, 2 and 4 API-server processes
(``host.api_server_count``). The costs are dynosim.host's reference figures (request 1200 us,
1.1 us per prompt token, 70 us per output token: see its docstring for their sources) unless
``--request-us``/``--input-token-us``/``--output-token-us`` say otherwise.

The table gives, per rate, mean TTFT and mean ITL in ms and the streaming processes'
utilisation. The knee is where a process count's TTFT leaves the unbounded line: the host's
streaming capacity is ``c / output_token_us`` tokens per second per replica.

Run: ``.venv/bin/python benchmarks/host_knee.py [--requests 1500] [--rates 10,20,...]``.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace

from dynosim import DeploymentConfig, Simulation
from dynosim.config import HostConfig
from dynosim.host import REFERENCE_INPUT_TOKEN_US, REFERENCE_OUTPUT_TOKEN_US, REFERENCE_REQUEST_US
from dynosim.perf.deployment import resolve
from dynosim.workload import ArrivalSpec, LengthSpec, WorkloadSpec, generate

PROCESSES = (1, 2, 4)


def main() -> None:
    """Print the sweep."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="Qwen/Qwen3-0.6B")
    ap.add_argument("--gpu", default="h200_sxm")
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--isl", type=float, default=512.0)
    ap.add_argument("--osl", type=float, default=256.0)
    ap.add_argument("--rates", default="20,40,60,80,100,120,160,200")
    ap.add_argument("--request-us", type=float, default=REFERENCE_REQUEST_US)
    ap.add_argument("--input-token-us", type=float, default=REFERENCE_INPUT_TOKEN_US)
    ap.add_argument("--output-token-us", type=float, default=REFERENCE_OUTPUT_TOKEN_US)
    args = ap.parse_args()
    base = DeploymentConfig.from_dict(
        {"model": args.model, "gpu": args.gpu, "backend": "vllm", "timing": "aic",
         "engine": {"max_num_seqs": 512, "max_num_batched_tokens": 8192},
         "slo": {"ttft_ms": None, "itl_ms": None}}
    )  # fmt: skip
    perf = resolve(base)
    costs = HostConfig(
        request_us=args.request_us,
        input_token_us=args.input_token_us,
        output_token_us=args.output_token_us,
    )
    variants: list[tuple[str, HostConfig | None]] = [("engine", None), ("unbounded", costs)]
    variants += [(f"c={c}", replace(costs, api_server_count=c)) for c in PROCESSES]
    print(
        f"{args.model} on 1 {args.gpu} (vLLM, AIC), {args.requests} Poisson requests, ISL "
        f"{args.isl:g} / OSL {args.osl:g} (lognormal, sigma 0.6); host: request "
        f"{args.request_us:g} us, {args.input_token_us:g} us/input token, "
        f"{args.output_token_us:g} us/output token; streaming capacity per process "
        f"{1e6 / args.output_token_us:,.0f} tok/s"
    )
    head = " ".join(f"{name:>21}" for name, _ in variants)
    print(f"{'rate':>6} {'out tok/s':>10} {head}")
    print(f"{'':>6} {'':>10} " + " ".join(f"{'TTFT  ITL  util':>21}" for _ in variants))
    start = time.perf_counter()
    for rate in (float(x) for x in args.rates.split(",")):
        spec = WorkloadSpec(
            requests=args.requests,
            arrival=ArrivalSpec(process="poisson", rate_rps=rate),
            input_tokens=LengthSpec(dist="lognormal", mean=args.isl, sigma=0.6),
            output_tokens=LengthSpec(dist="lognormal", mean=args.osl, sigma=0.6),
            seed=1,
        )
        reqs = generate(spec)
        cells = []
        tput = 0.0
        for _, host in variants:
            res = Simulation(replace(base, host=host), reqs, perf=perf).run()
            m = res.metrics
            tput = tput or m.output_token_throughput
            util = m.host.stream_utilization if m.host is not None else float("nan")
            util_s = "   -" if math.isnan(util) else f"{util:4.2f}"
            cells.append(
                f"{m.time_to_first_token.avg:8.1f} {m.inter_token_latency.avg:6.2f} {util_s}"
            )
        print(f"{rate:6g} {tput:10,.0f} " + " ".join(f"{c:>21}" for c in cells))
    print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
