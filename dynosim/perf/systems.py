"""GPU specs read from AIConfigurator's shipped system files (``systems/<name>.yaml``).

Each system file has a ``gpu`` section (``mem_capacity`` in bytes, dense tensor-core FLOP/s
``bfloat16_tc_flops`` / ``fp8_tc_flops``, HBM bandwidth ``mem_bw`` in bytes/s) and a ``node``
section whose ``intra_node_bw`` is the GPU-to-GPU bandwidth per GPU, one direction, in bytes/s
(NVLink, or PCIe for the PCIe cards such as ``l40s``). The other files in that directory
(``query_versions.yaml``, ``perf_data_reuse_manifest.yaml``, ...) have no ``gpu`` section and
are not systems. Prices are not in AIConfigurator: :mod:`dynosim.perf.catalog` adds them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import yaml

from dynosim.errors import ConfigError

AIC_PACKAGE = "aiconfigurator_core"


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One GPU type.

    Attributes:
        name: AIConfigurator system name.
        memory_bytes: HBM capacity.
        bf16_flops: Dense BF16 tensor-core FLOP/s.
        fp8_flops: Dense FP8 tensor-core FLOP/s, or None when the GPU has no FP8 units.
        fp4_flops: Dense FP4 tensor-core FLOP/s (``fp4_tc_flops``), or None when the GPU has
            no FP4 units (pre-Blackwell).
        hbm_bytes_per_s: Peak HBM bandwidth.
        nvlink_bytes_per_s: GPU-to-GPU bandwidth per GPU, one direction (PCIe for l40s).
        gpu_hour_usd: Default price of one GPU-hour (rough 2025 cloud on-demand list price), or
            None when dynosim has no price for this GPU (the cost metrics are then NaN unless
            the deployment sets ``gpu_hour_usd``).
    """

    name: str
    memory_bytes: int
    bf16_flops: float
    fp8_flops: float | None
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float
    gpu_hour_usd: float | None
    fp4_flops: float | None = None

    def flops(self, dtype: str) -> float:
        """Dense FLOP/s of the GEMMs of a ``dtype`` deployment.

        fp8 and fp8_block run on the FP8 tensor cores, nvfp4 on the FP4 ones; bf16 and mxfp4
        (4-bit weights dequantised into BF16 GEMMs, gpt-oss's format) on the BF16 ones.

        Raises:
            ConfigError: the GPU has no tensor cores for ``dtype``.
        """
        if dtype in ("fp8", "fp8_block"):
            if self.fp8_flops is None:
                raise ConfigError("dtype", dtype, f"bf16 ({self.name} has no FP8 tensor cores)")
            return self.fp8_flops
        if dtype == "nvfp4":
            if self.fp4_flops is None:
                have = "bf16 | fp8 | fp8_block" if self.fp8_flops is not None else "bf16"
                raise ConfigError("dtype", dtype, f"{have} ({self.name} has no FP4 tensor cores)")
            return self.fp4_flops
        return self.bf16_flops

    def check_moe_activation(self, activation: str | None) -> None:
        """MXFP8 activations for MXFP4 experts need FP4 tensor cores (Blackwell).

        Raises:
            ConfigError: ``mxfp8`` on a GPU without them.
        """
        if activation == "mxfp8" and self.fp4_flops is None:
            raise ConfigError(
                "moe_activation", "mxfp8", f"bf16 on {self.name} (MXFP8 activations with MXFP4 "
                "experts run on GPUs with FP4 tensor cores only: Blackwell)"
            )  # fmt: skip


_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when present: the same data as ``yaml.safe_load``, about 5x faster (a
system file costs 2-3 ms of a ``dynosim simulate`` process with the pure-Python one)."""


def _systems_dir() -> Traversable:
    return resources.files(AIC_PACKAGE) / "systems"


def _is_system_file(text: str) -> bool:
    """A system file has a top-level ``gpu:`` mapping (cheap test before parsing YAML)."""
    return any(line.startswith("gpu:") for line in text.splitlines())


@functools.lru_cache(maxsize=1)
def system_names() -> tuple[str, ...]:
    """Names of the systems AIConfigurator ships (``h100_sxm``, ``l40s``, ...), sorted."""
    names = []
    for entry in _systems_dir().iterdir():
        is_yaml = entry.is_file() and entry.name.endswith(".yaml")
        if is_yaml and _is_system_file(entry.read_text(encoding="utf-8")):
            names.append(entry.name.removesuffix(".yaml"))
    return tuple(sorted(names))


def _positive(name: str, section: dict[str, Any], key: str) -> float:
    value = section.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(
            "gpu", name, f"an AIConfigurator system file with a positive number at {key}"
        )
    return float(value)


@functools.lru_cache(maxsize=64)
def load_system(name: str) -> GpuSpec:
    """The GPU of AIConfigurator system ``name``, without a price (``gpu_hour_usd`` None).

    Raises:
        ConfigError: no such system, or its file lacks a field dynosim needs.
    """
    if name not in system_names():
        raise ConfigError("gpu", name, "an AIConfigurator system name")
    text = (_systems_dir() / f"{name}.yaml").read_text(encoding="utf-8")
    data = yaml.load(text, Loader=_SAFE_LOADER)
    gpu = data.get("gpu") if isinstance(data, dict) else None
    node = data.get("node") if isinstance(data, dict) else None
    if not isinstance(gpu, dict) or not isinstance(node, dict):
        raise ConfigError("gpu", name, "an AIConfigurator system file with gpu and node sections")
    has_fp8 = gpu.get("fp8_tc_flops") is not None  # e.g. a100_sxm has no FP8 tensor cores
    has_fp4 = gpu.get("fp4_tc_flops") is not None  # Blackwell only
    return GpuSpec(
        name=name,
        memory_bytes=int(_positive(name, gpu, "mem_capacity")),
        bf16_flops=_positive(name, gpu, "bfloat16_tc_flops"),
        fp8_flops=_positive(name, gpu, "fp8_tc_flops") if has_fp8 else None,
        hbm_bytes_per_s=_positive(name, gpu, "mem_bw"),
        nvlink_bytes_per_s=_positive(name, node, "intra_node_bw"),
        gpu_hour_usd=None,
        fp4_flops=_positive(name, gpu, "fp4_tc_flops") if has_fp4 else None,
    )
