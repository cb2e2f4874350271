"""Per-backend framework overhead of one engine step (scheduling, sampling, Python, launches).

AIConfigurator's database holds kernel time only; a real engine also spends host time on every
iteration. We model it as ``base_us + per_request_us * requests_in_batch``.

The constants below were fitted by ``benchmarks/calibrate_overhead.py`` (run it to re-derive
them and print the errors): every row of the calibration groups of AIConfigurator's
``silicon_sample.csv`` (Llama-3.1-8B-Instruct / h100_sxm / trtllm and Qwen3-32B / h100_sxm /
trtllm and sglang, aggregated) is replayed by the simulator as the closed-loop benchmark it was,
and the constants minimise the squared relative TPOT error (non-negative least squares). All
other rows are held out for validation. SGLang's fit is zero: even without overhead the
simulator's TPOT is 14% above the measurements there (AIC's SGLang kernels, or our mixing of
prefill chunks into decode steps, which SGLang does not do by default). vLLM has no calibration
rows; it uses TRT-LLM's constants (a guess: both launch CUDA graphs from a Python/C++ loop).
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


# Fitted by benchmarks/calibrate_overhead.py with the simulator's closed-loop replays:
# trtllm: 357 rows, TPOT MAPE 7.6% (Llama-3.1-8B) and 11.6% (Qwen3-32B fp8).
# sglang: 84 rows, TPOT MAPE 16.8% (bias +13.6% with the constants at their bound, zero).
TRTLLM_OVERHEAD = FrameworkOverhead(base_us=553.6, per_request_us=9.73)
SGLANG_OVERHEAD = FrameworkOverhead(base_us=0.0, per_request_us=0.0)
VLLM_OVERHEAD = TRTLLM_OVERHEAD

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
