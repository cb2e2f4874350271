"""Deployment configuration: one serving configuration of a cluster, frozen and validated.

``DeploymentConfig.from_dict`` is the edge: it rejects unknown fields and bad values with a
message naming the field, the value and what is allowed. The objects are never mutated; use
``dataclasses.replace`` to derive variants.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from dynosim.errors import ConfigError

Backend = Literal["vllm", "sglang", "trtllm"]
Timing = Literal["aic", "roofline"]
AicDatabaseMode = Literal["hybrid", "silicon"]
RouterName = Literal["round_robin", "random", "least_loaded", "kv_aware", "kv_load"]
DType = Literal["bf16", "fp8", "fp8_block", "nvfp4", "mxfp4", "int4_wo"]
KVDType = Literal["bf16", "fp8"]
Mode = Literal["agg", "disagg"]
Link = Literal["auto", "nvlink", "rdma"]
PlannerPolicy = Literal["load", "sla"]
PoolName = Literal["agg", "prefill", "decode"]

BLOCK_SIZES = (16, 32, 64, 128, 256, 512)
SGLANG_PAGE_SIZES = (1, 2, 4, 8)
"""Page sizes below 16 tokens: SGLang only (its ``--page-size`` defaults to 1)."""
SchedulePolicy = Literal["fcfs", "lpm"]
CapacityPolicy = Literal["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"]
BACKEND_ENGINE_FIELDS: dict[str, tuple[str, ...]] = {
    "vllm": (),
    "sglang": (
        "enable_mixed_chunk",
        "max_prefill_tokens",
        "schedule_policy",
        "schedule_conservativeness",
    ),
    "trtllm": ("capacity_scheduler_policy",),
}
"""The engine fields only one backend has (``None`` = that backend's default)."""


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(name, value, " | ".join(allowed))


def _int(name: str, value: object, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, value, "an integer")
    if value < low or (high is not None and value > high):
        raise ConfigError(name, value, f"an integer in [{low}, {high if high else 'inf'}]")


def _float(name: str, value: object, low: float, high: float, *, open_low: bool = False) -> None:
    bracket = "(" if open_low else "["
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(name, value, f"a number in {bracket}{low}, {high}]")
    # written so that NaN fails every comparison and is refused
    in_low = value > low if open_low else value >= low
    if not (in_low and value <= high):
        raise ConfigError(name, value, f"a finite number in {bracket}{low}, {high}]")


def _bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(name, value, "true | false")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Per-worker engine knobs.

    The first six apply to every backend and are named as vLLM names them; each backend's
    flag for them (``dynosim export`` writes it) is: ``max_num_seqs`` = SGLang
    ``--max-running-requests`` = TRT-LLM ``max_batch_size``; ``max_num_batched_tokens`` =
    SGLang ``--chunked-prefill-size`` = TRT-LLM ``max_num_tokens``; ``block_size`` = SGLang
    ``--page-size`` = TRT-LLM ``tokens_per_block``; ``enable_prefix_caching`` = SGLang's radix
    cache = TRT-LLM ``enable_block_reuse``.

    The others belong to one backend's scheduler (``None``: that backend's default) and are an
    error with another backend (:data:`BACKEND_ENGINE_FIELDS`):

    * SGLang (``sglang/srt/server_args.py``): ``enable_mixed_chunk`` (default false: prefill
      and decode batches alternate), ``max_prefill_tokens`` (16384: prompt tokens admitted per
      prefill batch), ``schedule_policy`` (``fcfs`` | ``lpm``: longest prefix match first),
      ``schedule_conservativeness`` (1.0: scales the output-token reservation that decides
      admission);
    * TRT-LLM (``tensorrt_llm/llmapi/llm_args.py`` ``SchedulerConfig``):
      ``capacity_scheduler_policy`` (``GUARANTEED_NO_EVICT``, the default: a request is
      admitted only if its whole output's KV can be reserved, and nothing is ever evicted |
      ``MAX_UTILIZATION``: pack the batch, pause the newest request on a shortage).
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 64
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    gpu_memory_utilization: float = 0.9
    enable_mixed_chunk: bool | None = None
    max_prefill_tokens: int | None = None
    schedule_policy: SchedulePolicy | None = None
    schedule_conservativeness: float | None = None
    capacity_scheduler_policy: CapacityPolicy | None = None

    def __post_init__(self) -> None:
        _int("engine.max_num_seqs", self.max_num_seqs, 1, 65536)
        _int("engine.max_num_batched_tokens", self.max_num_batched_tokens, 1, 1 << 20)
        if self.block_size not in BLOCK_SIZES + SGLANG_PAGE_SIZES:
            raise ConfigError(
                "engine.block_size", self.block_size, " | ".join(map(str, BLOCK_SIZES))
            )
        if self.enable_mixed_chunk is not None:
            _bool("engine.enable_mixed_chunk", self.enable_mixed_chunk)
        if self.max_prefill_tokens is not None:
            _int("engine.max_prefill_tokens", self.max_prefill_tokens, 1, 1 << 20)
        if self.schedule_policy is not None:
            _choice("engine.schedule_policy", self.schedule_policy, get_args(SchedulePolicy))
        if self.schedule_conservativeness is not None:
            _float("engine.schedule_conservativeness", self.schedule_conservativeness, 0.0, 100.0)
        if self.capacity_scheduler_policy is not None:
            _choice(
                "engine.capacity_scheduler_policy",
                self.capacity_scheduler_policy,
                get_args(CapacityPolicy),
            )
        _bool("engine.enable_prefix_caching", self.enable_prefix_caching)
        _bool("engine.enable_chunked_prefill", self.enable_chunked_prefill)
        _float(
            "engine.gpu_memory_utilization", self.gpu_memory_utilization, 0.0, 1.0, open_low=True
        )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                "engine.max_num_batched_tokens",
                self.max_num_batched_tokens,
                f">= engine.max_num_seqs ({self.max_num_seqs}), as vLLM requires",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class KVRouterConfig:
    """Knobs of the KV-aware router (Dynamo's cost function)."""

    overlap_weight: float = 1.0
    temperature: float = 0.0

    def __post_init__(self) -> None:
        _float("kv_router.overlap_weight", self.overlap_weight, 0.0, 1e6)
        _float("kv_router.temperature", self.temperature, 0.0, 1e6)


@dataclass(frozen=True, slots=True, kw_only=True)
class SLOConfig:
    """Service-level objectives a request must meet to count towards goodput (ms; None = none)."""

    ttft_ms: float | None = 2000.0
    itl_ms: float | None = 50.0
    e2e_ms: float | None = None

    def __post_init__(self) -> None:
        for f in ("ttft_ms", "itl_ms", "e2e_ms"):
            v = getattr(self, f)
            if v is not None:
                _float(f"slo.{f}", v, 0.0, 1e12, open_low=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolConfig:
    """One pool of a disaggregated deployment: ``workers`` engines of ``tp`` GPUs each.

    ``engine`` is the pool's engine settings: the deployment's top-level ``engine`` with the
    pool's own ``engine`` fields laid over it (``DeploymentConfig.from_dict`` merges them).
    """

    tp: int = 1
    workers: int = 1
    engine: EngineConfig = field(default_factory=EngineConfig)
    ep: int = 1
    moe_tp: int | None = None
    attention_dp: int = 1

    def __post_init__(self) -> None:
        _tp("tp", self.tp)
        _int("workers", self.workers, 1, 100_000)
        _parallel(self.tp, self.ep, self.moe_tp, self.attention_dp)

    @property
    def gpus_per_worker(self) -> int:
        """GPUs of one engine replica: ``tp x attention_dp``."""
        return self.tp * self.attention_dp

    @property
    def moe_tp_size(self) -> int:
        """Tensor parallelism inside each expert (derived when ``moe_tp`` is unset)."""
        return _moe_tp(self.tp, self.ep, self.moe_tp, self.attention_dp)

    @property
    def gpus(self) -> int:
        """GPUs the pool occupies."""
        return self.gpus_per_worker * self.workers


NVLINK_LATENCY_US = 10.0
"""Assumed per-transfer latency on NVLink inside a node (NIXL/UCX setup and completion
notice; an estimate, not a measurement: the wire latency itself is ~1 us)."""
RDMA_GBPS = 400.0
"""InfiniBand NDR / RoCE per GPU: one 400 Gb/s ConnectX-7 NIC per GPU on DGX/HGX H100,
H200 and B200 nodes (NVIDIA DGX H100/H200 user guide, "network ports")."""
RDMA_LATENCY_US = 50.0
"""Assumed per-transfer latency across nodes over RDMA (NIXL/UCX rendezvous, completion
notice and the extra hop through the NIC; an estimate)."""
GPUS_PER_NODE = 8
"""GPUs in one HGX/DGX node (AIConfigurator's ``systems/*.yaml``: ``num_gpus_per_node: 8``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KVTransferConfig:
    """The link a prompt's KV cache crosses from a prefill worker to a decode worker.

    ``gbps`` is the bandwidth of one GPU's link in gigabits per second; a TP group moves its
    shards over its ranks' links in parallel. ``None`` takes the default of ``link``:
    ``nvlink`` is the GPU's NVLink bandwidth (one direction, from the GPU catalog), ``rdma``
    400 Gb/s (:data:`RDMA_GBPS`), ``auto`` NVLink when both pools fit in one node
    (:data:`GPUS_PER_NODE` GPUs) and RDMA otherwise.
    """

    link: Link = "auto"
    gbps: float | None = None
    latency_us: float | None = None

    def __post_init__(self) -> None:
        _choice("kv_transfer.link", self.link, get_args(Link))
        if self.gbps is not None:
            _float("kv_transfer.gbps", self.gbps, 0.0, 1e7, open_low=True)
        if self.latency_us is not None:
            _float("kv_transfer.latency_us", self.latency_us, 0.0, 1e9)


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolLimits:
    """Worker-count bounds the planner keeps one pool within."""

    min_workers: int = 1
    max_workers: int = 8

    def __post_init__(self) -> None:
        _int("min_workers", self.min_workers, 1, 100_000)
        _int("max_workers", self.max_workers, 1, 100_000)
        if self.max_workers < self.min_workers:
            raise ConfigError(
                "max_workers", self.max_workers, f">= min_workers ({self.min_workers})"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannerConfig:
    """Autoscaling of the worker pools, as Dynamo's planner does it.

    Every ``metric_pulling_interval_s`` the planner samples what a real planner sees (waiting
    requests, KV-cache usage, arrivals, first tokens); every ``adjustment_interval_s`` it
    decides each pool's worker count within ``min_workers``/``max_workers`` (``prefill`` and
    ``decode`` override them per pool in disagg mode) and ``max_gpus``; a pool with a worker
    still starting is left alone (Dynamo's planner blocks adjustment while it scales). A new
    worker takes
    traffic ``startup_s`` after the decision; a removed one drains (no new requests, it
    finishes what it holds, then frees its GPUs).

    Policies:
      * ``load``: Dynamo's load-based planner. Scale a pool up by one worker when, averaged
        over the interval, its KV usage exceeds ``kv_scale_up`` or its waiting requests per
        worker exceed ``queue_scale_up`` (a prefill pool looks at its queue only), down by one
        when both are below their ``*_scale_down``. Defaults are Dynamo's
        (``--decode-kv-scale-up-threshold 0.9``,
        ``--decode-kv-scale-down-threshold 0.5``, ``--prefill-queue-scale-up-threshold 0.5``,
        ``--prefill-queue-scale-down-threshold 0.2``, ``--metric-pulling-interval 1``,
        ``--adjustment-interval 30``: ai-dynamo/dynamo v0.3 ``docs/architecture/planner.md``).
        Dynamo watches only KV usage on decode/aggregated workers; this planner also scales
        them on their queue, since an engine capped by ``max_num_seqs`` queues at low KV use.
      * ``sla``: Dynamo's SLA planner. Predict the next interval's arrival rate and mean
        input/output lengths as those of the last (a constant predictor), and set each pool to
        the workers that carry them: prefill tokens/s per worker for prompts of that mean
        length (computed in ``max_num_batched_tokens`` chunks at their growing context), and
        decode tokens/s per worker at the largest batch
        whose step meets the deployment's ``slo.itl_ms`` (both from the step-time model, as
        Dynamo's pre-deployment profile gives them). As Dynamo does, the estimates are
        corrected by what the interval showed: the decode ITL target is divided by observed
        ITL / the model's ITL at the observed batch, and the prefill load is scaled by
        ``min(1, observed TTFT / the model's prefill time)`` (ai-dynamo/dynamo
        ``components/planner``, "correction factor").
    """

    policy: PlannerPolicy = "load"
    adjustment_interval_s: float = 30.0
    metric_pulling_interval_s: float = 1.0
    startup_s: float = 120.0
    min_workers: int = 1
    max_workers: int = 8
    max_gpus: int | None = None
    kv_scale_up: float = 0.9
    kv_scale_down: float = 0.5
    queue_scale_up: float = 0.5
    queue_scale_down: float = 0.2
    prefill: PoolLimits | None = None
    decode: PoolLimits | None = None

    def __post_init__(self) -> None:
        _choice("planner.policy", self.policy, get_args(PlannerPolicy))
        _float("planner.adjustment_interval_s", self.adjustment_interval_s, 0.0, 1e7, open_low=True)
        _float(
            "planner.metric_pulling_interval_s",
            self.metric_pulling_interval_s,
            0.0,
            1e7,
            open_low=True,
        )
        _float("planner.startup_s", self.startup_s, 0.0, 1e7)
        _int("planner.min_workers", self.min_workers, 1, 100_000)
        _int("planner.max_workers", self.max_workers, 1, 100_000)
        if self.max_workers < self.min_workers:
            raise ConfigError(
                "planner.max_workers", self.max_workers, f">= planner.min_workers "
                f"({self.min_workers})"
            )  # fmt: skip
        if self.max_gpus is not None:
            _int("planner.max_gpus", self.max_gpus, 1, 1_000_000)
        for name in ("kv_scale_up", "kv_scale_down", "queue_scale_up", "queue_scale_down"):
            _float(f"planner.{name}", getattr(self, name), 0.0, 1e6)
        if self.kv_scale_down > self.kv_scale_up:
            raise ConfigError(
                "planner.kv_scale_down", self.kv_scale_down, f"<= planner.kv_scale_up "
                f"({self.kv_scale_up})"
            )  # fmt: skip
        if self.queue_scale_down > self.queue_scale_up:
            raise ConfigError(
                "planner.queue_scale_down", self.queue_scale_down, f"<= planner.queue_scale_up "
                f"({self.queue_scale_up})"
            )  # fmt: skip

    def limits(self, pool: str) -> PoolLimits:
        """The worker bounds of ``pool`` ("agg", "prefill" or "decode")."""
        own = self.prefill if pool == "prefill" else self.decode if pool == "decode" else None
        if own is not None:
            return own
        return PoolLimits(min_workers=self.min_workers, max_workers=self.max_workers)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostConfig:
    """The host processes in front of each engine replica: API server, tokenizer, detokenizer.

    The costs are CPU time of one host process (``dynosim.host`` has the model and sourced
    reference figures). ``request_us``: the fixed cost of one request (HTTP parse, request
    setup, the tokenizer call); ``input_token_us``: tokenisation per prompt token;
    ``output_token_us``: detokenisation and SSE streaming per output token. The process
    count per replica is ``api_server_count`` on vLLM (``--api-server-count``, default 1),
    ``tokenizer_workers`` on SGLang (``--tokenizer-worker-num``, default 1) and
    ``postprocess_workers`` on TensorRT-LLM (``trtllm-serve --num_postprocess_workers``,
    default 0: the server's own process turns the engine's responses into OpenAI chunks;
    ``N > 0``: N worker processes do, tensorrt_llm/commands/serve.py); another backend's field
    is an error. Unset: as many processes as there is work (the costs are pure delays). All
    costs 0 (the default) is the same as no host section.
    """

    api_server_count: int | None = None
    tokenizer_workers: int | None = None
    postprocess_workers: int | None = None
    request_us: float = 0.0
    input_token_us: float = 0.0
    output_token_us: float = 0.0

    def __post_init__(self) -> None:
        for name in ("api_server_count", "tokenizer_workers"):
            if getattr(self, name) is not None:
                _int(f"host.{name}", getattr(self, name), 1, 4096)
        if self.postprocess_workers is not None:
            _int("host.postprocess_workers", self.postprocess_workers, 0, 4096)
        for name in ("request_us", "input_token_us", "output_token_us"):
            _float(f"host.{name}", getattr(self, name), 0.0, 1e7)

    @property
    def processes(self) -> int | None:
        """Host processes per replica (None: unbounded; TRT-LLM's 0 workers: its one server)."""
        if self.api_server_count is not None:
            return self.api_server_count
        if self.postprocess_workers is not None:
            return max(1, self.postprocess_workers)
        return self.tokenizer_workers


HOST_COUNT_BACKEND = {"api_server_count": "vllm", "tokenizer_workers": "sglang",
                      "postprocess_workers": "trtllm"}  # fmt: skip
"""The backend that has each host process-count field (vLLM ``--api-server-count``, SGLang
``--tokenizer-worker-num``, TensorRT-LLM ``--num_postprocess_workers``)."""
SERVER_DEFAULT_HOST: dict[str, dict[str, int]] = {
    "vllm": {"api_server_count": 1},
    "sglang": {"tokenizer_workers": 1},
    "trtllm": {"postprocess_workers": 0},
}
"""Each server's own default process count (the sources in :class:`HostConfig`): what a
benchmark that records none ran with."""


SpecMethod = Literal["mtp", "eagle", "draft"]
SpecSampling = Literal["expected", "sampled"]
MTP_ACCEPTANCE = 0.85
"""Default acceptance of an MTP draft token: DeepSeek-V3's second-token acceptance rate,
"between 85% and 90%" (DeepSeek-V3 Technical Report, arXiv:2412.19437, section 5.4.3)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculativeConfig:
    """Speculative decoding (:mod:`dynosim.perf.speculative` has the model).

    ``acceptance``: one rate for every draft position, or ``num_speculative_tokens`` rates,
    position ``i`` accepted with probability ``p_i`` once ``1..i-1`` were. Required for
    ``eagle`` and ``draft`` (it depends on the heads or draft model and on the data); MTP
    defaults to :data:`MTP_ACCEPTANCE`. ``draft_model``: the draft model (``draft`` only).
    ``sampling``: ``expected`` (every request at the mean tokens per step) or ``sampled``
    (seeded draws per request).
    """

    method: SpecMethod = "mtp"
    num_speculative_tokens: int = 1
    acceptance: float | tuple[float, ...] | None = None
    draft_model: str | None = None
    sampling: SpecSampling = "expected"

    def __post_init__(self) -> None:
        _choice("speculative.method", self.method, get_args(SpecMethod))
        _int("speculative.num_speculative_tokens", self.num_speculative_tokens, 0, 16)
        _choice("speculative.sampling", self.sampling, get_args(SpecSampling))
        a = self.acceptance
        if a is None:
            if self.method != "mtp":
                raise ConfigError(
                    "speculative.acceptance", None, f"a rate in [0, 1] or a list of "
                    f"{self.num_speculative_tokens} (required for method {self.method})"
                )  # fmt: skip
            object.__setattr__(self, "acceptance", MTP_ACCEPTANCE)
        elif isinstance(a, list | tuple):
            if len(a) != self.num_speculative_tokens:
                raise ConfigError(
                    "speculative.acceptance", list(a),
                    f"{self.num_speculative_tokens} rates (one per speculative token) or one",
                )  # fmt: skip
            for x in a:
                _float("speculative.acceptance", x, 0.0, 1.0)
            object.__setattr__(self, "acceptance", tuple(float(x) for x in a))
        else:
            _float("speculative.acceptance", a, 0.0, 1.0)
        if (self.method == "draft") != (self.draft_model is not None):
            raise ConfigError(
                "speculative.draft_model", self.draft_model,
                "a model name with method: draft (and only then)",
            )  # fmt: skip


def _tp(name: str, value: object) -> None:
    _int(name, value, 1, 64)
    assert isinstance(value, int)
    if value & (value - 1):
        raise ConfigError(name, value, "a power of two (1, 2, 4, 8, ...)")


def _check_host(backend: str, host: HostConfig | None) -> None:
    if host is None:
        return
    if not isinstance(host, HostConfig):
        raise ConfigError("host", host, "a host section {api_server_count | tokenizer_workers | "
                          "postprocess_workers, request_us, input_token_us, "
                          "output_token_us}")  # fmt: skip
    for name, owner in HOST_COUNT_BACKEND.items():
        value = getattr(host, name)
        if value is not None and backend != owner:
            raise ConfigError(
                f"host.{name}", value, f"unset with backend {backend} (a {owner} option; "
                "vllm: api_server_count, sglang: tokenizer_workers, trtllm: postprocess_workers)"
            )  # fmt: skip


def _moe_tp(tp: int, ep: int, moe_tp: int | None, attention_dp: int) -> int:
    return moe_tp if moe_tp is not None else tp * attention_dp // ep


def _parallel(tp: int, ep: object, moe_tp: object, attention_dp: object) -> None:
    """Expert parallelism, expert TP and attention DP of one engine replica.

    A replica has ``tp x attention_dp`` GPUs; its MoE layers spread over the same GPUs as
    ``moe_tp x ep`` (so ``moe_tp`` defaults to ``tp x attention_dp / ep``).
    """
    _int("attention_dp", attention_dp, 1, 1024)
    _int("ep", ep, 1, 1024)
    assert isinstance(ep, int)
    assert isinstance(attention_dp, int)
    gpus = tp * attention_dp
    if moe_tp is None:
        if gpus % ep:
            raise ConfigError(
                "ep", ep, f"a divisor of tp x attention_dp ({tp} x {attention_dp} = {gpus})"
            )
        return
    _int("moe_tp", moe_tp, 1, 1024)
    assert isinstance(moe_tp, int)
    if moe_tp * ep != gpus:
        want = f"{gpus // ep}" if gpus % ep == 0 else "none"
        raise ConfigError(
            "moe_tp", moe_tp, f"{want}: moe_tp x ep = tp x attention_dp, the replica's {gpus} "
            f"GPUs (ep {ep})"
        )  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentConfig:
    """One serving deployment.

    ``mode: agg`` (the default): ``workers`` identical engines of ``tp`` GPUs each, every one
    prefilling and decoding. ``mode: disagg``: a ``prefill`` pool and a ``decode`` pool (each
    with its own ``tp``, ``workers`` and ``engine``); a request is routed by ``router`` to a
    prefill worker, its KV cache crosses ``kv_transfer`` to a decode worker picked by
    ``decode_router``. A prompt whose uncached part on that decode worker is at most
    ``max_local_prefill_tokens`` is prefilled there instead (0: always remotely). ``planner``
    scales the pools (absent: fixed).
    """

    model: str
    gpu: str
    backend: Backend = "vllm"
    timing: Timing = "aic"
    dtype: DType = "bf16"
    mode: Mode = "agg"
    tp: int = 1
    workers: int = 1
    prefill: PoolConfig | None = None
    decode: PoolConfig | None = None
    router: RouterName = "round_robin"
    decode_router: RouterName = "least_loaded"
    kv_router: KVRouterConfig = field(default_factory=KVRouterConfig)
    kv_transfer: KVTransferConfig = field(default_factory=KVTransferConfig)
    max_local_prefill_tokens: int = 0
    planner: PlannerConfig | None = None
    engine: EngineConfig = field(default_factory=EngineConfig)
    slo: SLOConfig = field(default_factory=SLOConfig)
    gpu_hour_usd: float | None = None
    framework_overhead_us: float | None = None
    calibration: str | None = None
    ep: int = 1
    moe_tp: int | None = None
    attention_dp: int = 1
    kv_cache_dtype: KVDType | None = None
    host: HostConfig | None = None
    speculative: SpeculativeConfig | None = None
    aic_database_mode: AicDatabaseMode = "hybrid"

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError("model", self.model, "a model name from the catalog")
        if not isinstance(self.gpu, str) or not self.gpu:
            raise ConfigError("gpu", self.gpu, "a GPU name from the catalog")
        _choice("backend", self.backend, get_args(Backend))
        _choice("timing", self.timing, get_args(Timing))
        _choice("aic_database_mode", self.aic_database_mode, get_args(AicDatabaseMode))
        _choice("dtype", self.dtype, get_args(DType))
        _choice("mode", self.mode, get_args(Mode))
        _choice("router", self.router, get_args(RouterName))
        _choice("decode_router", self.decode_router, get_args(RouterName))
        _tp("tp", self.tp)
        _int("workers", self.workers, 1, 100_000)
        if self.kv_cache_dtype is not None:
            _choice("kv_cache_dtype", self.kv_cache_dtype, get_args(KVDType))
        _int("max_local_prefill_tokens", self.max_local_prefill_tokens, 0, 1 << 30)
        if self.mode == "disagg":
            for name in ("prefill", "decode"):
                if not isinstance(getattr(self, name), PoolConfig):
                    raise ConfigError(
                        name, getattr(self, name), "a pool {tp, workers, engine} (mode: disagg)"
                    )
        else:
            _parallel(self.tp, self.ep, self.moe_tp, self.attention_dp)
            for name in ("prefill", "decode"):
                if getattr(self, name) is not None:
                    raise ConfigError(name, "a pool", "no pools with mode: agg (set mode: disagg)")
            if self.max_local_prefill_tokens:
                raise ConfigError(
                    "max_local_prefill_tokens", self.max_local_prefill_tokens, "0 with mode: agg"
                )
        self._check_engines()
        if self.planner is not None:
            self._check_planner(self.planner)
            if any(p.attention_dp > 1 for _, p in self.pools()):
                raise ConfigError(
                    "planner", "a planner", "no planner with attention_dp > 1 (not supported yet)"
                )
        if self.gpu_hour_usd is not None:
            _float("gpu_hour_usd", self.gpu_hour_usd, 0.0, 1e6)
        if self.framework_overhead_us is not None:
            _float("framework_overhead_us", self.framework_overhead_us, 0.0, 1e7)
        if self.calibration is not None and (
            not isinstance(self.calibration, str) or not self.calibration.strip()
        ):
            raise ConfigError("calibration", self.calibration, "the path of a profile YAML file")
        _check_host(self.backend, self.host)

    def _check_engines(self) -> None:
        """Backend-specific engine fields only with their backend (pool engines too)."""
        _check_backend_engine(self.backend, "", self.engine)
        for name, pool in self._own_pools():
            _check_backend_engine(self.backend, f"{name}.", pool.engine)

    def _own_pools(self) -> tuple[tuple[str, PoolConfig], ...]:
        return tuple((n, p) for n in ("prefill", "decode") if (p := getattr(self, n)) is not None)

    def _check_planner(self, planner: PlannerConfig) -> None:
        for name, pool in self.pools():
            lim = planner.limits(name)
            where = "planner" if name == "agg" or getattr(planner, name) is None else (
                f"planner.{name}"
            )  # fmt: skip
            if not lim.min_workers <= pool.workers <= lim.max_workers:
                field_name = "workers" if name == "agg" else f"{name}.workers"
                raise ConfigError(
                    field_name, pool.workers, f"within {where}.min_workers..max_workers "
                    f"({lim.min_workers}..{lim.max_workers})"
                )  # fmt: skip
        if planner.max_gpus is not None and self.gpus > planner.max_gpus:
            raise ConfigError(
                "planner.max_gpus", planner.max_gpus, f">= the initial GPUs ({self.gpus})"
            )
        if self.mode == "agg":
            for name in ("prefill", "decode"):
                if getattr(planner, name) is not None:
                    raise ConfigError(
                        f"planner.{name}", "limits", "pool limits only with mode: disagg"
                    )

    def pools(self) -> tuple[tuple[PoolName, PoolConfig], ...]:
        """The worker pools: ``(("agg", ...),)`` or ``(("prefill", ...), ("decode", ...))``."""
        if self.mode == "disagg":
            assert self.prefill is not None
            assert self.decode is not None
            return (("prefill", self.prefill), ("decode", self.decode))
        agg = PoolConfig(
            tp=self.tp,
            workers=self.workers,
            engine=self.engine,
            ep=self.ep,
            moe_tp=self.moe_tp,
            attention_dp=self.attention_dp,
        )
        return (("agg", agg),)

    def pool_view(self, name: PoolName) -> DeploymentConfig:
        """The aggregated deployment of one pool's workers (for sizing and step times)."""
        pool = dict(self.pools())[name]
        return DeploymentConfig(
            model=self.model,
            gpu=self.gpu,
            backend=self.backend,
            timing=self.timing,
            dtype=self.dtype,
            tp=pool.tp,
            workers=pool.workers,
            engine=pool.engine,
            slo=self.slo,
            gpu_hour_usd=self.gpu_hour_usd,
            framework_overhead_us=self.framework_overhead_us,
            calibration=self.calibration,
            ep=pool.ep,
            moe_tp=pool.moe_tp,
            attention_dp=pool.attention_dp,
            kv_cache_dtype=self.kv_cache_dtype,
            speculative=self.speculative if name != "prefill" else None,
            aic_database_mode=self.aic_database_mode,
        )

    @property
    def kv_dtype(self) -> KVDType:
        """The KV cache's element type.

        ``kv_cache_dtype`` if set; else fp8 for fp8, fp8_block and nvfp4 weights (as before:
        an fp8 deployment stores its KV cache in fp8), else (bf16, mxfp4, int4_wo) bf16.
        """
        if self.kv_cache_dtype is not None:
            return self.kv_cache_dtype
        return "bf16" if self.dtype in ("bf16", "mxfp4", "int4_wo") else "fp8"

    @property
    def moe_tp_size(self) -> int:
        """Tensor parallelism inside each expert (``moe_tp``, or ``tp x attention_dp / ep``)."""
        return _moe_tp(self.tp, self.ep, self.moe_tp, self.attention_dp)

    @property
    def gpus(self) -> int:
        """GPUs the deployment starts with (both pools in disagg mode)."""
        return sum(pool.gpus for _, pool in self.pools())

    @property
    def peak_gpus(self) -> int:
        """The most GPUs the deployment can hold: its planner's ceiling, or :attr:`gpus`."""
        p = self.planner
        if p is None:
            return self.gpus
        most = sum(pool.gpus_per_worker * p.limits(name).max_workers for name, pool in self.pools())
        return min(most, p.max_gpus) if p.max_gpus is not None else most

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeploymentConfig:
        """Build from parsed YAML/JSON, rejecting unknown fields and bad values.

        In disagg mode a pool's ``engine`` fields are laid over the top-level ``engine``, and
        a top-level ``tp`` or ``workers`` is an error (each pool has its own).
        """
        _check_keys(data, {f.name for f in fields(cls)})
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key in ("prefill", "decode", "planner"):
                continue
            sub = _NESTED.get(key)
            kwargs[key] = value if sub is None else _section(key, value, sub)
        mode = data.get("mode", "agg")
        if mode == "disagg":
            for key in _PER_POOL:
                if key in data:
                    raise ConfigError(
                        key, data[key], f"no top-level {key} with mode: disagg (set "
                        f"prefill.{key} and decode.{key})"
                    )  # fmt: skip
        engine = _mapping("engine", data.get("engine", {}))
        for key in ("prefill", "decode"):
            if key in data:
                kwargs[key] = _pool(key, data[key], engine)
        if "planner" in data:
            kwargs["planner"] = _planner(data["planner"])
        for required in ("model", "gpu"):
            if required not in kwargs:
                raise ConfigError(required, None, "a value (this field is required)")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form; ``from_dict(to_dict())`` gives an equal config.

        Fields left at ``None`` that only exist in one mode (pools, planner) are left out.
        """
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None and f.name in ("prefill", "decode", "planner", "speculative"):
                continue
            if self.mode == "disagg" and f.name in _PER_POOL:
                continue
            if f.name in _NEW_DEFAULTS and v == _NEW_DEFAULTS[f.name]:
                continue  # left out at their defaults: older configs keep their plain form
            out[f.name] = _plain(v)
        return out


_PER_POOL = ("tp", "workers", "ep", "moe_tp", "attention_dp")
_NEW_DEFAULTS: dict[str, object] = {
    "ep": 1,
    "moe_tp": None,
    "attention_dp": 1,
    "kv_cache_dtype": None,
    "host": None,
}


def _check_backend_engine(backend: str, where: str, engine: EngineConfig) -> None:
    """A backend-specific engine field set for another backend is an error."""
    for other, names in BACKEND_ENGINE_FIELDS.items():
        if other == backend:
            continue
        for name in names:
            value = getattr(engine, name)
            if value is not None:
                raise ConfigError(
                    f"{where}engine.{name}", value, f"only with backend: {other} (this is "
                    f"{backend})"
                )  # fmt: skip
    if backend != "sglang" and engine.block_size in SGLANG_PAGE_SIZES:
        raise ConfigError(
            f"{where}engine.block_size",
            engine.block_size,
            " | ".join(map(str, BLOCK_SIZES)) + f" with backend: {backend} (1-8: sglang only)",
        )


def _check_keys(data: object, top: set[str]) -> None:
    if not isinstance(data, Mapping):
        raise ConfigError("deployment", data, "a mapping of fields")
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(str(key), value, "a field name (a string)")
        if key not in top:
            raise ConfigError(key, value, "one of " + ", ".join(sorted(top)))


def _plain(v: object) -> Any:
    if _is_dc(v):
        out = {g.name: _plain(getattr(v, g.name)) for g in fields(v)}  # type: ignore[arg-type]
        if isinstance(v, PoolConfig):
            for name in ("ep", "moe_tp", "attention_dp"):
                if out[name] == _NEW_DEFAULTS[name]:
                    del out[name]
        return out
    if isinstance(v, tuple):
        return list(v)  # YAML and JSON both write lists
    return v


_NESTED: dict[str, type] = {
    "kv_router": KVRouterConfig,
    "engine": EngineConfig,
    "slo": SLOConfig,
    "kv_transfer": KVTransferConfig,
    "host": HostConfig,
    "speculative": SpeculativeConfig,
}


def _mapping(key: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, "a mapping of fields")
    return value


def _section(key: str, value: object, sub: type) -> Any:
    names = _names(sub)
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, "a mapping of " + ", ".join(names))
    for k in value:
        if k not in names:
            raise ConfigError(f"{key}.{k}", value[k], "one of " + ", ".join(names))
    try:
        return sub(**value)
    except ConfigError as exc:
        raise _prefixed(exc, key, sub) from None


def _prefixed(exc: ConfigError, key: str, sub: type) -> ConfigError:
    """``exc`` with its field named under ``key`` (``engine.x`` in a pool: ``decode.engine.x``)."""
    own = {"EngineConfig": "engine", "KVRouterConfig": "kv_router", "SLOConfig": "slo",
           "KVTransferConfig": "kv_transfer", "PlannerConfig": "planner",
           "HostConfig": "host", "SpeculativeConfig": "speculative"}  # fmt: skip
    field_name = exc.field
    head = own.get(sub.__name__)
    if head is not None and field_name.startswith(head + "."):
        field_name = field_name[len(head) + 1 :]
    if key == field_name.split(".")[0]:
        return exc
    return ConfigError(f"{key}.{field_name}", exc.value, exc.allowed)


def _pool(key: str, value: object, engine: Mapping[str, Any]) -> PoolConfig:
    value = _mapping(key, value)
    names = _names(PoolConfig)
    for k in value:
        if k not in names:
            raise ConfigError(f"{key}.{k}", value[k], "one of " + ", ".join(names))
    kwargs = dict(value)
    own = _mapping(f"{key}.engine", value.get("engine", {}))
    kwargs["engine"] = _section(f"{key}.engine", {**engine, **own}, EngineConfig)
    try:
        return PoolConfig(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{key}.{exc.field}", exc.value, exc.allowed) from None


def _planner(value: object) -> PlannerConfig:
    value = _mapping("planner", value)
    names = _names(PlannerConfig)
    kwargs: dict[str, Any] = {}
    for k, v in value.items():
        if k not in names:
            raise ConfigError(f"planner.{k}", v, "one of " + ", ".join(names))
        pool = k in ("prefill", "decode") and v is not None
        kwargs[k] = _section(f"planner.{k}", v, PoolLimits) if pool else v
    try:
        return PlannerConfig(**kwargs)
    except ConfigError as exc:
        raise _prefixed(exc, "planner", PlannerConfig) from None


def _names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def _is_dc(v: object) -> bool:
    return hasattr(v, "__dataclass_fields__")
