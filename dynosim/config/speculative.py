"""The speculative section: speculative decoding's method, draft length and acceptance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from dynosim.checks import choice, integer, number
from dynosim.errors import ConfigError

SpecMethod = Literal["mtp", "eagle", "draft"]
SpecSampling = Literal["expected", "sampled"]
MTP_ACCEPTANCE_LENGTHS = (1.92, 2.58, 2.82, 2.99, 3.01)
"""Mean tokens a verify step yields with 1-5 MTP draft tokens: DeepSeek-R1 on 8 B200 with
TensorRT-LLM, whose MTP reuses the checkpoint's one MTP module autoregressively for every draft
position after the first ("MTP Eagle", the default for DeepSeek-V3/R1, whose checkpoints ship a
single module): TensorRT-LLM tech blog 1, "Pushing Latency Boundaries: Optimizing DeepSeek-R1
Performance on NVIDIA B200 GPUs", table "Autoregressive MTP Layers" (strict acceptance)."""


def _conditional_rates(lengths: tuple[float, ...]) -> tuple[float, ...]:
    """Per-position acceptance ``p_k`` (given ``1..k-1`` accepted) that yields ``lengths``.

    ``L_k = 1 + sum_{i<=k} prod_{j<=i} p_j``, so ``p_k = (L_k - L_{k-1}) / (L_{k-1} - L_{k-2})``
    with ``L_0 = 1`` and ``L_{-1} = 0``.
    """
    previous = (0.0, 1.0, *lengths)
    return tuple(
        round((previous[k + 2] - previous[k + 1]) / (previous[k + 1] - previous[k]), 4)
        for k in range(len(lengths))
    )


MTP_ACCEPTANCE = _conditional_rates(MTP_ACCEPTANCE_LENGTHS)
"""Default acceptance of MTP draft position 1, 2, ... (0.92, 0.7174, 0.3636, 0.7083, 0.1176),
each given the earlier ones accepted: the rates that reproduce :data:`MTP_ACCEPTANCE_LENGTHS`
(positions past the fifth take the fifth's). The first, 0.92, is the trained module's
next-token acceptance (the DeepSeek-V3 report's "between 85% and 90%" for its second token,
arXiv:2412.19437, section 5.4.3); the later ones fall as the module runs on its own drafts,
which one rate for every position (0.85 before) did not show."""


def mtp_default_acceptance(num_speculative_tokens: int) -> tuple[float, ...] | float:
    """:data:`MTP_ACCEPTANCE` for ``num_speculative_tokens`` draft positions."""
    if num_speculative_tokens == 0:
        return MTP_ACCEPTANCE[0]
    rates = MTP_ACCEPTANCE + (MTP_ACCEPTANCE[-1],) * max(
        0, num_speculative_tokens - len(MTP_ACCEPTANCE)
    )
    return rates[:num_speculative_tokens]


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculativeConfig:
    """Speculative decoding (:mod:`dynosim.perf.speculative` has the model).

    ``acceptance``: one rate for every draft position, or ``num_speculative_tokens`` rates,
    position ``i`` accepted with probability ``p_i`` once ``1..i-1`` were. Required for
    ``eagle`` and ``draft`` (it depends on the heads or draft model and on the data); MTP
    defaults to :data:`MTP_ACCEPTANCE` (:func:`mtp_default_acceptance`). ``draft_model``: the
    draft model (``draft`` only).
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
            object.__setattr__(
                self, "acceptance", mtp_default_acceptance(self.num_speculative_tokens)
            )
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
