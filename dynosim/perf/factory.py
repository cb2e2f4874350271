"""Choose and build the step-time model a deployment asks for."""

from __future__ import annotations

from dynosim.config import DeploymentConfig
from dynosim.perf.aic import AicStepTime
from dynosim.perf.catalog import model_spec
from dynosim.perf.overhead import calibrated, deployment_profile
from dynosim.perf.protocol import StepTimeModel
from dynosim.perf.roofline import RooflineStepTime, physical_floor
from dynosim.perf.speculative import SpeculativeStepTime, draft_fraction


def step_time_model(config: DeploymentConfig) -> StepTimeModel:
    """The step-time model of ``config.timing`` for ``config``'s model, GPU, backend, TP, dtype.

    ``aic`` builds (or loads cached) AIConfigurator tables, a few seconds the first time.

    Raises:
        ConfigError: unknown model or GPU, fp8 on a GPU without FP8, or (for ``aic``)
            AIConfigurator lacks the model, GPU or backend; the message suggests
            ``timing: roofline``.
    """
    floor = physical_floor(config) if _floored(config) else None
    if config.timing == "aic":
        model = calibrated(AicStepTime.from_config(config), config, floor)
    else:
        model = calibrated(RooflineStepTime.from_config(config), config, floor)
    return speculative(model, config)


def _floored(config: DeploymentConfig) -> bool:
    """Whether the profile bounds ``config``'s kernel times by the physical floor.

    Not with ``framework_overhead_us`` (a constant step overhead, kernel factors 1): that is
    how :func:`dynosim.validation.validate.row_perf` gets the raw kernel model it applies a
    step calibration and the floor to itself (calibration probes must see the raw kernels).
    """
    if config.framework_overhead_us is not None:
        return False
    return deployment_profile(config).backend(config.backend).roofline_floor


def speculative(model: StepTimeModel, config: DeploymentConfig) -> StepTimeModel:
    """``model`` as a speculating engine runs it (``config.speculative``), or unchanged."""
    spec = config.speculative
    if spec is None or spec.num_speculative_tokens == 0:
        return model
    draft = model_spec(spec.draft_model) if spec.draft_model is not None else None
    fraction = draft_fraction(spec, model_spec(config.model), draft)
    return SpeculativeStepTime(model, spec.num_speculative_tokens, fraction)
