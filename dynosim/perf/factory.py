"""Choose and build the step-time model a deployment asks for."""

from __future__ import annotations

from dynosim.config import DeploymentConfig
from dynosim.perf.aic import AicStepTime
from dynosim.perf.protocol import StepTimeModel
from dynosim.perf.roofline import RooflineStepTime


def step_time_model(config: DeploymentConfig) -> StepTimeModel:
    """The step-time model of ``config.timing`` for ``config``'s model, GPU, backend, TP, dtype.

    ``aic`` builds (or loads cached) AIConfigurator tables, a few seconds the first time.

    Raises:
        ConfigError: unknown model or GPU, fp8 on a GPU without FP8, or (for ``aic``)
            AIConfigurator lacks the model, GPU or backend; the message suggests
            ``timing: roofline``.
    """
    if config.timing == "aic":
        return AicStepTime.from_config(config)
    return RooflineStepTime.from_config(config)
