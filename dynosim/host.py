"""Host processes in front of each engine replica: API server, tokenizer, detokenizer/streamer.

An engine's GPU work is fed and drained by CPU processes: vLLM's API server (one process by
default; ``--api-server-count N`` runs N, vllm-project/vllm RFC #12705 "the API server runs in a
single process, utilizing a single CPU ... it is important that we scale the API server", PR
#17546 which added the flag) and SGLang's TokenizerManager ("receiving requests, tokenizing,
streaming results ... may encounter single-core bottlenecks under high-concurrency",
sgl-project/sglang issue #6553; ``--tokenizer-worker-num N`` since PR #8964) and
``trtllm-serve``, whose own process turns the engine's responses into OpenAI chunks unless
``--num_postprocess_workers N`` (default 0) starts N processes for it
(tensorrt_llm/commands/serve.py). This module is their model, driven by
:class:`dynosim.config.HostConfig`: ``c`` processes per replica (``api_server_count`` |
``tokenizer_workers`` | ``postprocess_workers``, 0 of which is the server's one process; unset
= unbounded), and three CPU costs of one process.

**Tokenisation** (a queue in front of the router). A request arriving at ``a`` needs
``s = request_us + input_token_us * input_tokens`` (rounded to whole microseconds) of one
process. The processes of the entry pool's replicas (``c x replicas``; it grows when the
planner adds replicas) serve the requests first-come-first-served::

    start = max(a, earliest free process),   routed at  start + s.

With unbounded processes that is ``a + s``: a pure delay. The request's arrival as the client
sees it stays ``a``, so its TTFT includes the wait and the tokenisation.

**Detokenisation and streaming** (a per-replica queue that delays delivery). Every output
token costs ``output_token_us`` of one of the ``c`` processes of the replica that made it. The
engine is not slowed down (vLLM's engine core and SGLang's scheduler are separate processes
that do not wait for the API server); what the client sees is. The engine reports the tokens
of every step it completes (``EngineWorker.on_tokens``: one per decoding request, plus the
first tokens of the prompts the step completed; a fast-forwarded segment reports all its
steps at once), and the replica's queue of work ``X`` (in integer nanoseconds of one process,
so that fast-forward and stepping agree bit for bit) follows the Lindley recursion::

    X_j = max(0, X_{j-1} - c * (t_j - t_{j-1})) + tokens_j * output_token_us

drained by the ``c`` processes between step ends ``t``, in closed form over a segment (O(1)
numpy calls per segment: the cost grows with events, not tokens). A token made by the step
ending at ``t`` reaches the client when the queue it joined has drained, and at least one
token's cost after it was made::

    delivered = t + max(output_token_us, X(t) / c)

for the first token and for the last. While the processes keep up the lag is about
``output_token_us`` (a batch of ``n`` tokens takes ``n x output_token_us / c``); beyond, ``X``
builds up and both the first and the last tokens lag by it: TTFT grows with load (a knee),
and so does ITL while the backlog grows. With unbounded processes every token is delivered
``output_token_us`` after the engine made it (a pure delay). The first-token events come from
the request object the simulation hands the engine (:class:`StreamedRequest` notices the
engine setting its ``first_token_us``).

Approximations, stated: a step's tokens are delivered together when the queue has taken the
whole step (not one by one within it); tokenisation and streaming have separate capacities (in
vLLM the same API-server processes do both); a replica's processes are one pool (vLLM spreads
requests over its API servers round-robin); with speculative decoding a step counts one token
per request (not the accepted ones); a rejected request costs the host nothing; a planner sees
the client's TTFT and ITL but the engines' queues (a request being tokenised is in no queue it
watches).

Reference costs (not defaults: the defaults are 0 so that results without a ``host`` section
are unchanged; calibration from measurements belongs to ``dynosim.validation``):

* :data:`REFERENCE_INPUT_TOKEN_US` 1.1 us: Hugging Face ``tokenizers`` encodes a 4 MB document
  (~1M tokens) in 1.1 s on one thread (charlesxu.io/parallel-tokenizer); the IREE tokenizer
  benchmark (gist benvanik/9090b155a3102b333896c1d92c451cbc) measures HF tokenizers (Python) at
  2.7 MiB/s on GPT-2 English prose, ~1.4 us per ~4-byte token.
* :data:`REFERENCE_REQUEST_US` 1200 us: a chat-completions request of 131 prompt tokens took
  1.3-2.8 ms in the tokenizer with its chat template (tenstorrent/tt-inference-server issue
  #2173), i.e. ~1.2 ms beyond 131 x 1.1 us.
* :data:`REFERENCE_OUTPUT_TOKEN_US` 70 us, an upper bound: vLLM's single API-server process
  streamed 12,850 output tok/s with 63.6 req/s and 14,320 prompt tok/s at concurrency 400
  (Llama-3.2-1B on A100, vllm-project/vllm PR #12287, before that PR relieved the API server);
  if that process was saturated, (1 s - 63.6 x 1.2 ms - 14,320 x 1.1 us) / 12,850 ~ 70 us per
  output token.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dynosim.config import DeploymentConfig, HostConfig
from dynosim.engine.state import RunningRequest
from dynosim.metrics import NAN, HostMetrics, Stat
from dynosim.types import Request

if TYPE_CHECKING:
    from dynosim.cluster.pool import WorkerPool

REFERENCE_INPUT_TOKEN_US = 1.1
"""Tokenisation per prompt token, HF tokenizers on one thread (see the module docstring)."""
REFERENCE_REQUEST_US = 1200.0
"""Fixed host cost of one chat request (see the module docstring)."""
REFERENCE_OUTPUT_TOKEN_US = 70.0
"""Detokenisation + SSE streaming per output token, an upper bound (see the module docstring)."""


class StreamedRequest(RunningRequest):
    """A request whose first token is announced.

    The engine's ``rr.first_token_us = t`` calls ``on_first(rr, t)`` (once: the engine sets it
    once, when the prompt's last chunk is computed).
    """

    __slots__ = ("_first_us", "_on_first")

    def __init__(
        self, req: Request, *, on_first: Callable[[StreamedRequest, int], None], **kw: Any
    ) -> None:
        self._on_first = on_first
        super().__init__(req, **kw)

    @property
    def first_token_us(self) -> int:
        """The engine's first token (-1: not yet)."""
        return self._first_us

    @first_token_us.setter
    def first_token_us(self, value: int) -> None:
        self._first_us = value
        if value >= 0:
            self._on_first(self, value)


class _Stream:
    """The streaming queue of one replica's processes (integer work units, exact)."""

    __slots__ = ("t", "work")

    def __init__(self) -> None:
        self.t = 0  # the last step end it has seen (us)
        self.work = 0  # queued work after that step's tokens were added (ns of one process)

    def steps(self, ends: Sequence[int], per_step: int, last: int, capacity: int) -> None:
        """Add the work of the steps ending at ``ends``: ``per_step`` each, plus ``last``.

        Drain-then-add Lindley recursion ``X_j = max(0, X_{j-1} - capacity * (t_j - t_{j-1}))
        + W_j``, in closed form for a run of steps: with ``U_1 = X_0 - D_1`` and ``U_j =
        W_{j-1} - D_j``, ``max(0, X_{j-1} - D_j) = P_j - min(0, P_1, ..., P_j)`` for the
        partial sums ``P`` of ``U``. Integers, so a fast-forwarded segment gives the bits of
        stepping its steps one by one.
        """
        k = len(ends)
        if k == 1:
            drained = self.work - capacity * (ends[0] - self.t)
            self.work = (drained if drained > 0 else 0) + per_step + last
            self.t = ends[0]
            return
        t = np.asarray(ends, dtype=np.int64)
        gaps = np.diff(t, prepend=self.t) * capacity
        u = np.full(k, per_step, dtype=np.int64)
        u[0] = self.work
        u -= gaps
        p = np.cumsum(u)
        low = min(0, int(np.minimum.accumulate(p)[-1]))
        self.work = int(p[-1]) - low + per_step + last
        self.t = int(t[-1])


class Host:
    """The host processes of one deployment: the tokenisation queue and per-replica streams.

    Call order: :meth:`tokenized_us` for each request as it arrives (in arrival order); per
    replica, :meth:`first_token` and :meth:`deliver` in the order the engine makes first
    tokens and completes requests.
    """

    def __init__(
        self, config: HostConfig, n_requests: int, *, entry_dp: int = 1, decode_dp: int = 1
    ) -> None:
        """``entry_dp``/``decode_dp``: engine workers (DP ranks) per replica of each pool.

        A replica's processes serve all its attention-DP ranks (vLLM runs its API servers
        for the whole DP group), so each rank's clock gets ``c / decode_dp`` of them.
        """
        self.processes = config.processes
        self._entry_dp = entry_dp
        self._rank_processes = None if self.processes is None else self.processes / decode_dp
        self.request_us = float(config.request_us)
        self.input_token_us = float(config.input_token_us)
        self.output_token_us = float(config.output_token_us)
        self._out_us = round(self.output_token_us)
        self.tokenizes = self.request_us > 0 or self.input_token_us > 0
        self.streams = self.output_token_us > 0
        # Only finite processes queue the engine's tokens (unbounded: a pure delay).
        self.queues_tokens = self.streams and self.processes is not None
        self._free: list[int] = []  # when each tokenising process is next free
        self._streams: dict[int, _Stream] = {}
        # Streaming in integer work: a token costs _token_ns of one process, a replica's
        # processes do _capacity ns of work per microsecond.
        self._token_ns = round(self.output_token_us * 1000)
        self._capacity = None if self._rank_processes is None else (
            max(1, round(self._rank_processes * 1000))
        )  # fmt: skip
        # Each request's first token as the client sees it (-1: not yet, or no streaming).
        self.first_us = np.full(n_requests, -1, dtype=np.int64)
        self.tokenize_busy_us = 0
        self.stream_busy_us = 0.0
        self.tokenize_wait_us = np.zeros(n_requests, dtype=np.int64)
        self.stream_delay_us = np.zeros(n_requests, dtype=np.int64)

    def tokenized_us(self, rid: int, now: int, input_tokens: int, replicas: int) -> int:
        """When a request has been tokenised (and reaches the router).

        Args:
            rid: The request's id.
            now: Its arrival.
            input_tokens: Its prompt length.
            replicas: The entry pool's engine workers now (DP ranks; their replicas'
                processes share the queue).
        """
        service = round(self.request_us + self.input_token_us * input_tokens)
        self.tokenize_busy_us += service
        if self.processes is None:
            return now + service
        free = self._free
        for _ in range(self.processes * max(1, replicas // self._entry_dp) - len(free)):
            heapq.heappush(free, now)
        start = max(now, free[0])
        heapq.heapreplace(free, start + service)
        self.tokenize_wait_us[rid] = start - now
        return start + service

    def on_tokens(self, worker: Any, ends: Sequence[int], per_step: int, firsts: int) -> None:
        """The engine worker ``worker`` completed steps ending at ``ends``.

        Each made ``per_step`` tokens (one per decoding request), and the last also the
        first tokens of ``firsts`` requests whose prompt it completed.
        """
        assert self._capacity is not None  # registered only with finite processes
        s = self._streams.get(worker.index)
        if s is None:
            s = self._streams[worker.index] = _Stream()
        cost = self._token_ns
        s.steps(ends, per_step * cost, firsts * cost, self._capacity)

    def _lag_us(self, replica: int) -> int:
        """How long after a step a token it made reaches the client.

        The step's tokens wait for the queue they joined to drain (and take at least one
        token's own cost).
        """
        s = self._streams.get(replica)
        assert self._capacity is not None
        backlog = -(-s.work // self._capacity) if s is not None else 0
        return backlog if backlog > self._out_us else self._out_us

    def first_token(self, rid: int, replica: int, now: int) -> int:
        """When the client receives request ``rid``'s first token, made at ``now``.

        ``replica`` is the index of the worker (a DP rank) that made it.
        """
        first = now + (self._out_us if self._capacity is None else self._lag_us(replica))
        self.first_us[rid] = first
        return first

    def deliver(
        self, rid: int, replica: int, first_us: int, finish_us: int, tokens: int
    ) -> tuple[int, int]:
        """The client's first-token and finish times of a request the engine completed now.

        Args:
            rid: The request's id.
            replica: The worker (DP rank) that made the tokens.
            first_us: The engine's first token.
            finish_us: The engine's last token (now).
            tokens: Output tokens.
        """
        out = self._out_us
        self.stream_busy_us += tokens * self.output_token_us
        if self._capacity is None:
            return first_us + out, finish_us + out
        first = int(self.first_us[rid])
        finish = max(finish_us + self._lag_us(replica), first)
        self.stream_delay_us[rid] = finish - finish_us - out
        return first, finish

    def metrics(self, measured: np.ndarray, entry_us: float, decode_us: float) -> HostMetrics:
        """Summary over the ``measured`` request ids.

        Args:
            measured: The ids of the measured requests.
            entry_us: Provisioned worker-time (DP ranks) of the entry (tokenising) pool, in
                microseconds.
            decode_us: The same of the decode (streaming) pool (the entry pool when
                aggregated).
        """
        c = self.processes or 0
        rank_c = self._rank_processes or 0.0
        return HostMetrics(
            processes=c,
            tokenize_utilization=_ratio(self.tokenize_busy_us, entry_us / self._entry_dp * c),
            stream_utilization=_ratio(self.stream_busy_us, decode_us * rank_c),
            tokenize_queue_time=Stat.of(self.tokenize_wait_us[measured] / 1e3),
            stream_delay=Stat.of(self.stream_delay_us[measured] / 1e3),
        )


def build_host(
    config: DeploymentConfig, n_requests: int, entry: WorkerPool, decode: WorkerPool
) -> Host | None:
    """The host processes, if the deployment models them; the decode pool tells its tokens."""
    if config.host is None:
        return None
    dp = {name: pool.attention_dp for name, pool in config.pools()}
    host = Host(config.host, n_requests, entry_dp=dp[entry.name], decode_dp=dp[decode.name])
    if host.queues_tokens:
        decode.set_on_tokens(host.on_tokens)
    return host


def _ratio(busy: float, capacity: float) -> float:
    return busy / capacity if capacity > 0 else NAN
