"""Benchmark clients: the requests a load generator sends, as it sends them.

Closed-loop clients with fixed nominal lengths, as the common LLM benchmark tools run them. A
:class:`BenchmarkClient` names the tool (``inferencex``, ``vllm-bench`` or ``aiperf``) and the
run (concurrency, ISL/OSL, how many requests); the tool fills in what it does by default:

* ``inferencex``: SemiAnalysis InferenceX/InferenceMAX's fork of vLLM's ``benchmark_serving.py``
  (``benchmarks/benchmark_lib.sh``, ``utils/bench_serving/benchmark_serving.py``,
  ``.github/workflows/benchmark-tmpl.yml``): ``--max-concurrency c --request-rate inf`` (all
  ``c`` clients start at once, no ramp), ``--num-prompts 10*c``, ``--num-warmups 2*c`` (copies
  of the first prompt, not measured; runs before 2026-01 had none: ``warmups: 0``),
  ``--random-range-ratio 0.8`` (input and output lengths uniform in [0.8, 1.0] x nominal),
  ``ignore_eos`` (outputs exactly as long as asked).
* ``vllm-bench``: ``vllm bench serve`` with ``--max-concurrency c``: ``--num-prompts 1000``,
  ``--request-rate inf``, no warm-up, ``--random-range-ratio 0`` (fixed lengths), ``ignore_eos``.
* ``aiperf``: ``aiperf profile --concurrency c``: the request count must be given
  (``--request-count``), warm-up only when asked (``--warmup-request-count``), fixed lengths
  (``--isl-stddev 0 --osl-stddev 0``), ``ignore_eos`` via ``--extra-inputs``.

Every field can be set explicitly instead. ``ramp_up_s`` spreads the clients' first requests
evenly over that time (all at 0 by default, as the tools start them).

A real client does not send its next request the instant the previous one completes: the
tool's own work between the two (parse the last SSE chunk, record the metrics, release the
``--max-concurrency`` semaphore and build the next HTTP request on one asyncio event loop,
vLLM ``benchmarks/serve.py`` ``limited_request_func``; AIPerf's credit return and re-issue
between its worker processes) takes a while that varies from request to request, so clients
that start together with equal lengths drift apart instead of staying in lockstep.
``send_overhead_s`` (the mean of that gap) and ``send_jitter_s`` (its spread: the gap is
uniform in ``send_overhead_s +- send_jitter_s``) model it: every request, the first ones too
(they go out as the event loop reaches each task), is sent that long after it could be. Both
are 0 by default (no tool documents a figure; set them from a measurement of the harness);
the gaps are drawn from ``seed`` by their own stream, so the lengths do not change with them.

Warm-up requests are the first requests of the workload (ids 0..warmups-1), sent first by the
same ``c`` clients, and they are a phase of their own: every tool waits for the last warm-up
response before it starts the measured run, which then begins as a run from scratch, its ``c``
first requests at once (InferenceX's ``benchmark_serving.py`` ``benchmark()``: ``await
asyncio.gather(*warmup_tasks)``, "Warmup completed.", then "Starting main benchmark run..."
with a new semaphore; vLLM ``benchmarks/serve.py`` likewise; AIPerf's guide "Warmup Phase
Configuration", Grace Period: "By default, AIPerf waits indefinitely for all warmup responses
before starting profiling").
So warm-ups do not spare the measured means the first wave of ``c`` simultaneous prompts; they
only warm what the engine keeps (the prefix cache holds the first prompt, which they copy).
The measured phase's first requests are sent ``after_warmup``; the simulation leaves the
first ``warmups`` to complete out of its metrics.

How each tool reports latencies differs (which requests a mean covers, per-request TPOT vs
token-weighted ITL); :mod:`dynosim.validation.client_metrics` computes each tool's figures from
the simulated per-request records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

import numpy as np

from dynosim.checks import choice, integer
from dynosim.errors import ConfigError
from dynosim.types import HASH_BLOCK_TOKENS, Request
from dynosim.workload.limits import MAX_REQUESTS, MAX_TIME_S, MAX_TOKENS, REQUESTS_WHY
from dynosim.workload.traces import Workload

ClientName = Literal["inferencex", "vllm-bench", "aiperf"]
CLIENTS: tuple[str, ...] = get_args(ClientName)


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchmarkClient:
    """One closed-loop benchmark run by a named tool (None fields: the tool's default)."""

    name: ClientName
    concurrency: int
    isl: int
    osl: int
    requests: int | None = None
    warmups: int | None = None
    range_ratio: float | None = None
    ramp_up_s: float = 0.0
    send_overhead_s: float = 0.0
    send_jitter_s: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        choice("client.name", self.name, CLIENTS)
        integer("client.concurrency", self.concurrency, 1, MAX_REQUESTS)
        integer("client.isl", self.isl, 1, MAX_TOKENS)
        integer("client.osl", self.osl, 1, MAX_TOKENS)
        if self.requests is not None:
            integer("client.requests", self.requests, 1, MAX_REQUESTS)
        elif self.name == "aiperf":
            raise ConfigError("client.requests", None, "a request count (aiperf --request-count)")
        if self.warmups is not None:
            integer("client.warmups", self.warmups, 0, MAX_REQUESTS)
        if self.range_ratio is not None:
            r = self.range_ratio
            if isinstance(r, bool) or not isinstance(r, int | float) or not 0.0 <= r <= 1.0:
                raise ConfigError("client.range_ratio", r, "a number in [0, 1]")
        t = self.ramp_up_s
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0.0 <= t < MAX_TIME_S:
            raise ConfigError("client.ramp_up_s", t, f"a number of seconds in [0, {MAX_TIME_S:g})")
        for name in ("send_overhead_s", "send_jitter_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= v < 60.0:
                raise ConfigError(f"client.{name}", v, "a number of seconds in [0, 60)")
        if self.send_jitter_s > self.send_overhead_s:
            raise ConfigError(
                "client.send_jitter_s", self.send_jitter_s,
                f"at most client.send_overhead_s ({self.send_overhead_s}): a gap is never < 0",
            )  # fmt: skip
        integer("client.seed", self.seed, 0, 2**63 - 1)
        if self.measured + self.warmup_count > MAX_REQUESTS:
            raise ConfigError("client.requests", self.measured, f"with warm-up, {REQUESTS_WHY}")

    # the tool's defaults --------------------------------------------------------------------
    @property
    def measured(self) -> int:
        """Requests measured: ``requests``, or the tool's default."""
        if self.requests is not None:
            return self.requests
        return 10 * self.concurrency if self.name == "inferencex" else 1000

    @property
    def warmup_count(self) -> int:
        """Warm-up requests: ``warmups``, or the tool's default (InferenceX: ``2 * c``)."""
        if self.warmups is not None:
            return self.warmups
        return 2 * self.concurrency if self.name == "inferencex" else 0

    @property
    def ratio(self) -> float:
        """Lengths are uniform in ``[ratio, 1] x nominal`` (1: fixed)."""
        if self.range_ratio is not None:
            return float(self.range_ratio)
        return 0.8 if self.name == "inferencex" else 1.0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BenchmarkClient:
        """Build from a workload file's ``client:`` mapping.

        Raises:
            ConfigError: An unknown or missing field, or a bad value.
        """
        if not isinstance(d, Mapping):
            raise ConfigError("client", d, "a mapping of client fields")
        names = [f.name for f in fields(cls)]
        for k in d:
            if k not in names:
                raise ConfigError(f"client.{k}", d[k], "one of " + ", ".join(names))
        for k in ("name", "concurrency", "isl", "osl"):
            if k not in d:
                raise ConfigError(f"client.{k}", None, "a value (the field is required)")
        return cls(**d)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientWorkload:
    """A workload file that names a benchmark client (``client:`` and an optional ``name``)."""

    client: BenchmarkClient
    name: str = "client"

    def load(self) -> Workload:
        """The client's requests, the warm-ups counted out."""
        return Workload(
            requests=tuple(client_requests(self.client)),
            warmup_requests=self.client.warmup_count,
            name=self.name,
        )


def client_requests(client: BenchmarkClient) -> list[Request]:
    """The requests ``client`` sends: warm-ups (copies of the first prompt), then the measured.

    Each phase (warm-up, measured) runs its own closed loop of ``concurrency`` clients: its
    first ``concurrency`` requests at ``ramp_up_s * i / concurrency`` (0 by default) from the
    phase's start (the measured phase's: ``after_warmup``, that long after the warm-ups drain:
    ``delay_s``), each later one as soon as its client's previous one of the phase completes
    (``after_id``), each sent a gap uniform in ``send_overhead_s +- send_jitter_s`` later
    (first requests: added to their start; later ones: ``delay_s``).
    Lengths are ``round(uniform(ratio, 1) * nominal)`` (at least 1), drawn from ``seed``.
    Every prompt has its own hash ids (no shared prefix)
    except the warm-up copies, which repeat the first measured prompt's.
    """
    c, n_warm, n = client.concurrency, client.warmup_count, client.measured
    rng = np.random.default_rng(client.seed)
    in_rng, out_rng, gap_rng = rng.spawn(3)  # the first two as before the gaps existed
    isl = _lengths(client.isl, client.ratio, n, in_rng)
    osl = _lengths(client.osl, client.ratio, n, out_rng)
    total = n_warm + n
    gaps = _gaps(client.send_overhead_s, client.send_jitter_s, total, gap_rng)
    out: list[Request] = []
    next_hash = 0
    first_hashes: tuple[int, ...] = ()
    for k in range(total):
        m = max(0, k - n_warm)  # the measured request this one is (warm-ups copy the first)
        units = -(-isl[0 if k < n_warm else m] // HASH_BLOCK_TOKENS)
        if k < n_warm:
            if not first_hashes:
                first_hashes = tuple(range(next_hash, next_hash + units))
                next_hash += units
            hashes = first_hashes
        elif m == 0 and first_hashes:
            hashes = first_hashes  # the first measured prompt is the one the warm-ups copied
        else:
            hashes = tuple(range(next_hash, next_hash + units))
            next_hash += units
        # a phase's first c requests start it: the warm-ups' at the run's start, the measured
        # ones once the warm-ups have drained (they follow the warm-up phase)
        phase_k = k if k < n_warm else m
        first = phase_k < c
        start = client.ramp_up_s * phase_k / c + gaps[k] if first else 0.0
        after_warmup = first and k >= n_warm > 0
        out.append(
            Request(
                id=k,
                arrival_s=start if first and not after_warmup else 0.0,
                delay_s=start if after_warmup else 0.0 if first else gaps[k],
                input_tokens=isl[0 if k < n_warm else m],
                output_tokens=osl[0 if k < n_warm else m],
                block_hashes=hashes,
                after_id=None if first else k - c,
                after_warmup=after_warmup,
            )
        )
    return out


def _lengths(nominal: int, ratio: float, n: int, rng: np.random.Generator) -> list[int]:
    if ratio >= 1.0:
        return [nominal] * n
    draws = rng.uniform(ratio * nominal, nominal, n)
    out: list[int] = np.maximum(1, np.rint(draws)).astype(np.int64).tolist()
    return out


def _gaps(mean: float, jitter: float, n: int, rng: np.random.Generator) -> list[float]:
    """``n`` send gaps uniform in ``mean +- jitter`` (all ``mean`` without jitter, no draw)."""
    if jitter <= 0.0:
        return [float(mean)] * n
    out: list[float] = rng.uniform(mean - jitter, mean + jitter, n).tolist()
    return out
