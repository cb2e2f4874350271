"""The speculative section: speculative decoding's method, draft length and acceptance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from dynosim.checks import choice, integer, number
from dynosim.errors import ConfigError

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
        # Fills in the MTP default and turns a list of rates into a tuple here, not in
        # from_dict: direct constructions (tests build SpeculativeConfig(acceptance=[...]) and
        # SpeculativeConfig(num_speculative_tokens=0)) and dataclasses.replace rely on it.
        choice("speculative.method", self.method, get_args(SpecMethod))
        integer("speculative.num_speculative_tokens", self.num_speculative_tokens, 0, 16)
        choice("speculative.sampling", self.sampling, get_args(SpecSampling))
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
                number("speculative.acceptance", x, 0, 1)
            object.__setattr__(self, "acceptance", tuple(float(x) for x in a))
        else:
            number("speculative.acceptance", a, 0, 1)
        if (self.method == "draft") != (self.draft_model is not None):
            raise ConfigError(
                "speculative.draft_model", self.draft_model,
                "a model name with method: draft (and only then)",
            )  # fmt: skip
