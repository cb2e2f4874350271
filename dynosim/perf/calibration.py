"""Calibration profiles: what ``dynosim calibrate`` fits and a deployment applies.

A profile is a YAML file (``calibration: PROFILE.yaml`` in a deployment; absent: the shipped
``dynosim/perf/profiles/default.yaml``). Per backend it holds:

* ``step``: the framework overhead of one engine step, ``base_us + per_request_us * requests +
  per_token_us * tokens`` (host time AIConfigurator's kernel database lacks), and per-phase
  kernel correction factors ``decode`` (multiplies the kernel time of a step's decode requests)
  and ``prefill`` (what its prefill chunks add to it);
* ``generations`` (optional): the same step terms for the GPUs of one generation
  (:data:`GENERATIONS`), fitted where the calibration rows of that generation support it; a
  GPU of a generation without its own terms takes ``step``;
* ``synchronous`` (optional, vLLM): the host work per step that async scheduling overlaps with
  the GPU (``base_us``, ``per_request_us``, ``per_token_us``), added to every step of an engine
  that runs without it (``engine.async_scheduling: false``; vLLM before 0.14 by default);
* ``per_layer_us`` (optional): step overhead per decoder layer of the model, added to the step's
  ``base_us`` (:attr:`BackendCalibration.per_layer_us`);
* ``roofline_floor`` (optional, default false): a step's calibrated kernel time is never below
  the physical floor of the same step (every op at the GPU's peak FLOP/s and bandwidths,
  :func:`dynosim.perf.roofline.physical_floor`);
* ``host``: per-request host cost in front of the engine, ``request_us`` (HTTP, request setup,
  the tokenizer call, first-token streaming) and ``input_token_us`` (tokenisation per prompt
  token), and ``output_token_us``, the time the server's process spends streaming one output
  token (it saturates at high token rates): the deployment's ``host:`` section takes these
  unless it sets its own;
* ``sigma``: the residual spread, the standard deviation of ``log(simulated / measured)`` per
  metric (``ttft``, ``tpot``) on the rows the profile was checked on, for error bands.

``fitted_on`` records the measurements, groups and row count a profile was fitted on. What
``sigma`` means for a simulated value and an SLO is :mod:`dynosim.perf.error_bands`'.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from dynosim.config import SERVER_DEFAULT_HOST, HostConfig
from dynosim.errors import ConfigError, DynosimError
from dynosim.files import parse_yaml, read_text, yaml_syntax_error

DEFAULT_PROFILE = Path(__file__).parent / "profiles" / "default.yaml"
PROFILE_VERSION = 1
BACKENDS = ("vllm", "sglang", "trtllm")
METRICS = ("ttft", "tpot")
UNRECORDED_CLIENTS = ("closed-loop", "inferencex", "queued")
"""What a measurement that records no client may be replayed as: a plain closed loop (fixed
lengths, every client's rounds back to back), InferenceX's client (10 x c prompts, lengths
jittered in [0.8, 1] x nominal, no warm-up), or that client with one stream more than the
engine admits (``queued``: c + 1 streams against ``max_num_seqs = c``, so every request waits
for a slot and its TTFT counts from when it was issued; see
:func:`dynosim.validation.validate.assume_client`)."""


GENERATIONS = {
    "hopper": ("h100_sxm", "h100_pcie", "h200_sxm"),
    "blackwell": ("b200_sxm", "b300_sxm", "gb200", "gb300", "rtx_pro_6000_server"),
}
"""AIConfigurator systems by GPU architecture (NVIDIA: H100/H200 are Hopper, SM 9.0; B200,
B300, GB200, GB300 and RTX PRO 6000 are Blackwell, SM 10.x/12.0). A calibration profile may
hold step terms per generation (:attr:`BackendCalibration.generations`): the framework's host
work per step runs on the node's CPUs and its kernels on another architecture (launch latency,
CUDA-graph replay, the kernel choice of each backend), so both move with the generation while
AIConfigurator's per-kernel tables already cover the GPU itself."""


def gpu_generation(gpu: str) -> str | None:
    """The generation of an AIConfigurator system (None: one of no :data:`GENERATIONS`)."""
    return next((g for g, names in GENERATIONS.items() if gpu in names), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCalibration:
    """Framework overhead and kernel correction of one engine step (times in microseconds)."""

    base_us: float = 0.0
    per_request_us: float = 0.0
    per_token_us: float = 0.0
    prefill: float = 1.0
    decode: float = 1.0

    @property
    def kernel_exact(self) -> bool:
        """No per-token term and both kernel factors 1 (the plain overhead model applies)."""
        return self.per_token_us == 0.0 and self.prefill == 1.0 and self.decode == 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class HostCalibration:
    """Host cost in front of the engine (microseconds).

    ``request_us`` and ``input_token_us``: per request, a delay in its TTFT and latency.
    ``output_token_us``: the server's own process(es) stream each output token for that long
    (:mod:`dynosim.host`, with the server's default process count,
    :data:`dynosim.config.SERVER_DEFAULT_HOST`): a delay while they keep up, a queue in front
    of every token and, in a closed loop, the limit of the whole run's throughput once they
    do not.
    """

    request_us: float = 0.0
    input_token_us: float = 0.0
    output_token_us: float = 0.0

    def delay_us(self, input_tokens: int) -> float:
        """The host time of one request of ``input_tokens`` prompt tokens."""
        return self.request_us + self.input_token_us * input_tokens

    def host_config(self, backend: str, *, delays: bool = True) -> HostConfig:
        """This cost as a deployment's ``host:`` section on ``backend``.

        A streaming cost runs on the server's default process count (the count it was fitted
        with, :data:`~dynosim.config.SERVER_DEFAULT_HOST`); ``delays=False`` leaves the
        per-request delays out (they are then added to the metrics instead).
        """
        count = SERVER_DEFAULT_HOST[backend] if self.output_token_us > 0 else {}
        return HostConfig(
            request_us=self.request_us if delays else 0.0,
            input_token_us=self.input_token_us if delays else 0.0,
            output_token_us=self.output_token_us,
            **count,
        )


SOURCE_COSTS = ("request_us", "input_token_us", "output_token_us")
"""The host costs a measurement source may set over its backend's (:class:`SourceCalibration`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceCalibration:
    """What differs for the rows of one measurement file that record no client.

    How a benchmark was run is a property of the campaign that wrote the file, not of the
    backend: ``client`` (one of :data:`UNRECORDED_CLIENTS`), the per-request host delays
    ``request_us``/``input_token_us`` when fitted on the file's own rows, and the streaming
    cost per output token ``output_token_us`` fitted with them (None: the backend's). The
    streaming cost is the server's, but of the server *build* the campaign ran (a file records
    no version the profile could match), so it goes with the file too.
    """

    client: str
    request_us: float | None = None
    input_token_us: float | None = None
    output_token_us: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendCalibration:
    """One backend's calibration: step overhead, host cost, residual spread.

    ``generations``: step terms of their own for the GPUs of a generation (:meth:`step_for`).
    ``synchronous``: the step overhead an engine adds when it does not overlap its scheduling
    with the GPU (vLLM ``--no-async-scheduling``, the default before vLLM 0.14: the
    scheduler's work for step N+1 and the output processing of step N run between the steps
    instead of under step N's kernels, vllm-project/vllm PR #19970); only its ``_us`` terms
    are used.
    ``unrecorded_client``: the client model that best explained the fitted rows that record no
    client (``dynosim calibrate`` tries each of :data:`UNRECORDED_CLIENTS`); such rows of this
    backend are replayed with it. ``sources``: the measurement files (a row's ``source``)
    whose rows that record no client were fitted with a client or host delays of their own.
    Rows of any other file (and deployments) take the backend's.
    """

    step: StepCalibration = field(default_factory=StepCalibration)
    host: HostCalibration = field(default_factory=HostCalibration)
    sigma: Mapping[str, float] = field(default_factory=dict)
    unrecorded_client: str = "closed-loop"
    sources: Mapping[str, SourceCalibration] = field(default_factory=dict)
    generations: Mapping[str, StepCalibration] = field(default_factory=dict)
    synchronous: StepCalibration | None = None
    per_layer_us: float = 0.0
    roofline_floor: bool = False

    def step_for(self, gpu: str, overlapped: bool = True, layers: int = 0) -> StepCalibration:
        """The step terms on ``gpu``: its generation's (:data:`GENERATIONS`), else ``step``.

        ``overlapped=False`` (an engine without async scheduling): plus the ``synchronous``
        overhead terms, when the profile has them. ``layers``: the model's decoder layers,
        each adding ``per_layer_us`` to the step's ``base_us``.
        """
        own = self.generations.get(gpu_generation(gpu) or "")
        s = own if own is not None else self.step
        if self.per_layer_us and layers:
            s = replace(s, base_us=s.base_us + self.per_layer_us * layers)
        x = self.synchronous
        if overlapped or x is None:
            return s
        return replace(s, base_us=s.base_us + x.base_us,
                       per_request_us=s.per_request_us + x.per_request_us,
                       per_token_us=s.per_token_us + x.per_token_us)  # fmt: skip

    def client_for(self, source: str) -> str:
        """The client model of a row from ``source`` that records none."""
        own = self.sources.get(source)
        return own.client if own is not None else self.unrecorded_client

    def host_for(self, source: str) -> HostCalibration:
        """The host cost of a row from ``source`` that records no client."""
        own = self.sources.get(source)
        if own is None:
            return self.host
        fields = {k: v for k in SOURCE_COSTS if (v := getattr(own, k)) is not None}
        return replace(self.host, **fields)


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationProfile:
    """Per-backend calibrations and what they were fitted on."""

    backends: Mapping[str, BackendCalibration]
    fitted_on: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""

    def backend(self, name: str) -> BackendCalibration:
        """The calibration of backend ``name`` (all-default when the profile lacks it)."""
        return self.backends.get(name, BackendCalibration())

    def sigma(self, backend: str, metric: str) -> float:
        """Residual spread of ``metric`` (``ttft``, ``tpot``/``itl``) for ``backend`` (0: none)."""
        key = "tpot" if metric in ("tpot", "itl") else metric
        return float(self.backend(backend).sigma.get(key, 0.0))

    def to_dict(self) -> dict[str, Any]:
        """The profile as written to YAML."""
        return {
            "version": PROFILE_VERSION,
            "fitted_on": dict(self.fitted_on),
            "backends": {
                name: {
                    "step": asdict(b.step),
                    "host": asdict(b.host),
                    "sigma": dict(b.sigma),
                    "unrecorded_client": b.unrecorded_client,
                    **({"sources": _sources_dict(b.sources)} if b.sources else {}),
                    **(
                        {"generations": {g: asdict(c) for g, c in sorted(b.generations.items())}}
                        if b.generations
                        else {}
                    ),
                    **(
                        {"synchronous": {k: getattr(b.synchronous, k) for k in SYNC_KEYS}}
                        if b.synchronous is not None
                        else {}
                    ),
                    **({"per_layer_us": b.per_layer_us} if b.per_layer_us else {}),
                    **({"roofline_floor": True} if b.roofline_floor else {}),
                }
                for name, b in sorted(self.backends.items())
            },
        }

    def write(self, path: str | Path, header: str = "") -> None:
        """Write the profile as YAML (``header``: comment lines on top)."""
        text = yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)
        lines = "".join(f"# {line}\n" for line in header.splitlines())
        Path(path).write_text(lines + text)


def _number(where: str, name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError("calibration", where, f"{name} a number (got {value!r})")
    x = float(value)
    if not (low <= x <= high) or math.isnan(x):
        raise ConfigError("calibration", where, f"{name} in [{low:g}, {high:g}] (got {x:g})")
    return x


def _flag(where: str, name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError("calibration", where, f"{name} true | false (got {value!r})")
    return value


def _sources_dict(sources: Mapping[str, SourceCalibration]) -> dict[str, dict[str, Any]]:
    return {
        k: {f: v for f, v in asdict(c).items() if v is not None} for k, c in sorted(sources.items())
    }


def _client(where: str, name: str, value: object) -> str:
    if value not in UNRECORDED_CLIENTS:
        raise ConfigError(
            "calibration", where, f"{name} {' | '.join(UNRECORDED_CLIENTS)} (got {value!r})"
        )
    return str(value)


def _sources(where: str, name: str, raw: object) -> dict[str, SourceCalibration]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError("calibration", where, f"{name} a mapping (got {type(raw).__name__})")
    out = {}
    for key, value in raw.items():
        at = f"{name}[{str(key)!r}]"
        v = _section(where, f"{at} with", value, ("client", *SOURCE_COSTS))
        if "client" not in v:
            raise ConfigError("calibration", where, f"{at} with a client")
        delays = {k: _number(where, f"{at}.{k}", v[k], 0.0, 1e7)
                  for k in SOURCE_COSTS if k in v}  # fmt: skip
        out[str(key)] = SourceCalibration(client=_client(where, f"{at}.client", v["client"]),
                                          **delays)  # fmt: skip
    return out


def _section(where: str, name: str, data: object, keys: tuple[str, ...]) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError("calibration", where, f"{name} a mapping (got {type(data).__name__})")
    unknown = sorted(set(map(str, data)) - set(keys))
    if unknown:
        raise ConfigError(
            "calibration",
            where,
            f"{name} fields {', '.join(keys)} (unknown: "
            f"{unknown[0] if unknown[0].isprintable() else repr(unknown[0])})",  # one line
        )
    return dict(data)


STEP_KEYS = ("base_us", "per_request_us", "per_token_us", "prefill", "decode")
SYNC_KEYS = STEP_KEYS[:3]
"""The terms of a backend's ``synchronous`` section (step overheads, no kernel factors)."""


def _step(where: str, name: str, raw: object, keys: tuple[str, ...] = STEP_KEYS) -> StepCalibration:
    s = _section(where, f"{name} with", raw, keys)
    return StepCalibration(**{
        k: _number(where, f"{name}.{k}", v, 0.0 if k.endswith("_us") else 0.01,
                   1e7 if k.endswith("_us") else 100.0)
        for k, v in s.items()
    })  # fmt: skip


def profile_from_dict(data: object, where: str) -> CalibrationProfile:
    """Build a profile from parsed YAML; ``where`` (the file) names it in errors.

    Raises:
        ConfigError: ``calibration: got 'FILE'; allowed: ...`` naming the bad field.
    """
    top = _section(where, "a profile with", data, ("version", "fitted_on", "backends"))
    version = top.get("version", PROFILE_VERSION)
    if version != PROFILE_VERSION:
        raise ConfigError("calibration", where, f"version {PROFILE_VERSION} (got {version!r})")
    backends_raw = _section(where, "backends with", top.get("backends"), BACKENDS)
    backends = {}
    for name, raw in backends_raw.items():
        keys = ("step", "host", "sigma", "unrecorded_client", "sources", "generations",
                "synchronous", "per_layer_us", "roofline_floor")  # fmt: skip
        b = _section(where, f"backends.{name} with", raw, keys)
        step = _step(where, f"backends.{name}.step", b.get("step"))
        gens = _section(where, f"backends.{name}.generations with", b.get("generations"),
                        tuple(GENERATIONS))  # fmt: skip
        generations = {
            g: _step(where, f"backends.{name}.generations.{g}", v) for g, v in gens.items()
        }
        h = _section(where, f"backends.{name}.host with", b.get("host"),
                     ("request_us", "input_token_us", "output_token_us"))  # fmt: skip
        g = _section(where, f"backends.{name}.sigma with", b.get("sigma"), METRICS)
        host = HostCalibration(
            **{k: _number(where, f"backends.{name}.host.{k}", v, 0.0, 1e7) for k, v in h.items()}
        )
        sigma = {k: _number(where, f"backends.{name}.sigma.{k}", v, 0.0, 10.0)
                 for k, v in g.items()}  # fmt: skip
        client = _client(where, f"backends.{name}.unrecorded_client",
                         b.get("unrecorded_client", "closed-loop"))  # fmt: skip
        sources = _sources(where, f"backends.{name}.sources", b.get("sources"))
        sync = (_step(where, f"backends.{name}.synchronous", b["synchronous"], SYNC_KEYS)
                if b.get("synchronous") is not None else None)  # fmt: skip
        backends[name] = BackendCalibration(step=step, host=host, sigma=sigma,
                                            unrecorded_client=client, sources=sources,
                                            generations=generations, synchronous=sync,
                                            per_layer_us=_number(
                                                where, f"backends.{name}.per_layer_us",
                                                b.get("per_layer_us", 0.0), 0.0, 1e6),
                                            roofline_floor=_flag(
                                                where, f"backends.{name}.roofline_floor",
                                                b.get("roofline_floor", False)))  # fmt: skip
    fitted = top.get("fitted_on") or {}
    if not isinstance(fitted, Mapping):
        raise ConfigError("calibration", where, "fitted_on a mapping")
    return CalibrationProfile(backends=backends, fitted_on=dict(fitted), source=where)


def _profile_error(path: Path, reason: str) -> DynosimError:
    return ConfigError("calibration", str(path), f"a readable profile YAML file ({reason})")


@functools.lru_cache(maxsize=32)
def _load(path: str, mtime_ns: int) -> CalibrationProfile:
    del mtime_ns  # part of the cache key only: an edited file is read again
    p = Path(path)
    text = read_text(p, _profile_error)
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError("calibration", path, yaml_syntax_error(p, exc)) from None
    return profile_from_dict(data, path)


def load_profile(path: str | Path | None = None) -> CalibrationProfile:
    """Read a profile file (None: the shipped default); cached until the file changes.

    Raises:
        ConfigError: missing or unreadable file, bad YAML, an unknown or out-of-range field;
            one line ``calibration: got 'FILE'; allowed: ...``.
    """
    p = Path(path) if path is not None else DEFAULT_PROFILE
    try:
        mtime = p.stat().st_mtime_ns
    except OSError as exc:
        raise _profile_error(p, str(exc.strerror or exc)) from None
    return _load(str(p), mtime)
