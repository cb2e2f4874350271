"""``dynosim models``, ``dynosim gpus``, ``dynosim backends``: what can be simulated.

The lists come from where the simulator reads them (``dynosim.perf.catalog``: AIConfigurator's
model configs and systems, dynosim's default GPU prices; AIConfigurator's kernel database
versions per GPU and backend), so they cannot drift from what ``simulate`` accepts.
"""

from __future__ import annotations

import argparse

from dynosim.errors import DynosimError
from search.cli.shared import make_console

PRICE_SOURCE = (
    "dynosim default (dynosim/perf/catalog.py GPU_HOUR_USD): a rough 2025 US cloud on-demand "
    "list price per GPU-hour; a deployment's gpu_hour_usd overrides it"
)

BACKEND_NOTES = {
    "vllm": "vLLM v1: decode first, chunked prefill in the decode step, newest request "
    "preempted (recomputed) on a KV shortage",
    "sglang": "SGLang: prefill and decode batches alternate (enable_mixed_chunk mixes them), "
    "KV reserved for outputs, retraction on a KV shortage, lpm prefix scheduling",
    "trtllm": "TensorRT-LLM: in-flight batching; capacity scheduler GUARANTEED_NO_EVICT "
    "(default) or MAX_UTILIZATION",
}
"""One line per backend (``dynosim/engine/policies/``; the README's "Backend schedulers")."""


def add_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``models``, ``gpus`` and ``backends``."""
    parser.add_argument("--filter", metavar="TEXT", help="only names containing TEXT")


def run(args: argparse.Namespace) -> int:
    """Print the list ``args.command`` names."""
    console = make_console()
    table = {"models": _models, "gpus": _gpus, "backends": _backends}[args.command](args.filter)
    console.print(table)
    return 0


def _keep(name: str, text: str | None) -> bool:
    return text is None or text.lower() in name.lower()


def _models(text: str | None):  # type: ignore[no-untyped-def]
    from rich.table import Table

    from dynosim.perf.catalog import MODEL_ALIASES, model_names, model_spec

    t = Table(title="models (model: in a deployment; or a path to a Hugging Face config.json)")
    for col in ("model", "params", "kind", "layers", "kv heads", "kernels timed as"):
        t.add_column(col, justify="right" if col in ("params", "layers", "kv heads") else "left")
    shown = 0
    for name in model_names():
        if not _keep(name, text):
            continue
        try:
            m = model_spec(name)
        except DynosimError as exc:  # an architecture dynosim cannot size yet
            t.add_row(name, "", "not supported", "", "", str(exc).split("; allowed: ")[-1][:60])
            continue
        kind = "MoE" if m.is_moe else "dense"
        if m.is_mla:
            kind += " MLA"
        kind += f" {m.topk}/{m.experts} experts" if m.is_moe else ""
        alias = MODEL_ALIASES.get(name, m.aic_name or "")
        t.add_row(name, f"{m.total_params / 1e9:.1f} B", kind, str(m.layers), str(m.kv_heads),
                  "" if alias == name else alias)  # fmt: skip
        shown += 1
    t.caption = f"{shown} models"
    return t


def _gpus(text: str | None):  # type: ignore[no-untyped-def]
    from rich.table import Table

    from dynosim.perf.catalog import gpu_names, gpu_spec

    t = Table(title="GPUs (gpu: in a deployment)", caption=f"price: {PRICE_SOURCE}")
    for col in ("gpu", "memory GiB", "BF16 TFLOP/s", "FP8", "FP4", "HBM TB/s", "$/GPU-hour"):
        t.add_column(col, justify="left" if col == "gpu" else "right")
    for name in gpu_names():
        if not _keep(name, text):
            continue
        g = gpu_spec(name)

        def tf(x: float | None) -> str:
            return "-" if x is None else f"{x / 1e12:,.0f}"

        price = "none (set gpu_hour_usd)" if g.gpu_hour_usd is None else f"{g.gpu_hour_usd:.2f}"
        t.add_row(name, f"{g.memory_bytes / 2**30:,.0f}", tf(g.bf16_flops), tf(g.fp8_flops),
                  tf(g.fp4_flops), f"{g.hbm_bytes_per_s / 1e12:.2f}", price)  # fmt: skip
    return t


def _backends(text: str | None):  # type: ignore[no-untyped-def]
    from rich.table import Table

    from dynosim.perf.aic.key import _query_version
    from dynosim.perf.catalog import gpu_names

    t = Table(title="backends (backend: in a deployment) and AIConfigurator's kernel data")
    t.add_column("backend")
    t.add_column("scheduler")
    t.add_column("measured kernels (timing: aic) on")
    for backend, note in BACKEND_NOTES.items():
        if not _keep(backend, text):
            continue
        data = []
        for gpu in gpu_names():
            try:
                data.append(f"{gpu} {_query_version(gpu, backend)}")
            except DynosimError:
                continue
        t.add_row(backend, note, ", ".join(data) or "none (timing: roofline only)")
    return t
