"""Per-backend framework overhead of one engine step (scheduling, sampling, Python, launches).

AIConfigurator's database holds kernel time only; a real engine also spends host time on every
iteration. We model it as ``base_us + per_request_us * requests_in_batch``.

The constants below were fitted by ``benchmarks/calibrate_overhead.py`` (run it to re-derive
them and print the fit error) on real-GPU rows of AIConfigurator's ``silicon_sample.csv``:
Llama-3.1-8B-Instruct / h100_sxm / trtllm (agg) and Qwen3-32B / h100_sxm / trtllm and sglang.
All other rows are held out for validation. The fit uses a closed-form model of a closed-loop
run at fixed concurrency ``c``: a request's decode steps run at batch ``c`` (TPOT = one decode
step at the mean KV length plus the prefills of the other requests that interleave with it),
solved by non-negative least squares on TPOT. vLLM has no calibration rows; it reuses SGLang's
constants (both are Python-scheduled engines with CUDA graphs for decode).
"""

from __future__ import annotations

from dataclasses import dataclass

from dynosim.config import DeploymentConfig


@dataclass(frozen=True, slots=True)
class FrameworkOverhead:
    """Host-side time added to every engine step.

    Attributes:
        base_us: Constant per step.
        per_request_us: Added per request in the step (prefilling or decoding).
    """

    base_us: float
    per_request_us: float = 0.0

    def us(self, n_requests: int) -> float:
        """Overhead of one step holding ``n_requests`` requests, in microseconds."""
        return self.base_us + self.per_request_us * n_requests


# Fitted by benchmarks/calibrate_overhead.py against the AIC step-time model (see module doc).
TRTLLM_OVERHEAD = FrameworkOverhead(base_us=800.0, per_request_us=5.0)
SGLANG_OVERHEAD = FrameworkOverhead(base_us=1500.0, per_request_us=5.0)
VLLM_OVERHEAD = SGLANG_OVERHEAD

DEFAULT_OVERHEADS: dict[str, FrameworkOverhead] = {
    "trtllm": TRTLLM_OVERHEAD,
    "sglang": SGLANG_OVERHEAD,
    "vllm": VLLM_OVERHEAD,
}


def framework_overhead(config: DeploymentConfig) -> FrameworkOverhead:
    """The overhead of ``config``'s backend; ``config.framework_overhead_us`` overrides it.

    An override is a constant per step (no per-request term).
    """
    if config.framework_overhead_us is not None:
        return FrameworkOverhead(float(config.framework_overhead_us), 0.0)
    return DEFAULT_OVERHEADS[config.backend]
