"""Readers for the result files benchmark tools write: one measured point per file.

* **AIPerf** ``profile_export_aiperf.json`` (ai-dynamo/aiperf,
  ``docs/tutorials/working-with-profile-exports.md``, "Aggregated Statistics (JSON)"): one
  object per metric with ``unit`` and ``avg``/``p50``/...; we read ``time_to_first_token.avg``
  and ``inter_token_latency.avg`` (ms; AIPerf's ITL is per request ``(latency - TTFT) /
  (output tokens - 1)``, what validate compares with the simulated ``tpot``),
  ``input_sequence_length.avg`` and ``output_sequence_length.avg`` (tokens), and from
  ``input_config`` (documented as not stable across versions) ``loadgen.concurrency`` and
  ``endpoint.model_names[0]``.
* **AIPerf** ``profile_export_aiperf.csv`` (same page, "Aggregated Statistics (CSV)"): a first
  section ``Metric,avg,min,max,p1,...`` with rows such as ``Time to First Token (ms)``,
  ``Inter Token Latency (ms)``, ``Input Sequence Length (tokens)`` and ``Output Sequence Length
  (tokens)``; later sections (``Metric,Value``, GPU telemetry) are skipped. The CSV records
  neither the model nor the concurrency: they come from the context.
* **vLLM** ``vllm bench serve --save-result`` JSON (vllm-project/vllm
  ``vllm/benchmarks/serve.py``: ``result_json`` holds ``model_id``, ``num_prompts``,
  ``request_rate``, ``max_concurrency`` and the benchmark result: ``completed``,
  ``total_input_tokens``, ``total_output_tokens``, ``mean_ttft_ms``, ``mean_tpot_ms``,
  ``mean_itl_ms``...): ISL and OSL are the totals over ``completed``; its ``backend`` key is
  the client's endpoint kind (``vllm``, ``openai-chat``), not the serving engine.

None of these files says which GPU, engine or TP served the run: the ``context`` mapping
(``dynosim validate --deployment D.yaml``: ``model``, ``gpu``, ``backend``, ``tp``, ``dtype``;
``--concurrency N``) fills what the file lacks. A missing or malformed value is a one-line
``WorkloadError`` naming the file and the field.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dynosim.checks import is_number
from dynosim.errors import WorkloadError
from dynosim.validation.measurement import Measurement

_AIPERF_CSV_ROWS = {
    "Time to First Token (ms)": "ttft_ms",
    "Inter Token Latency (ms)": "tpot_ms",
    "Input Sequence Length (tokens)": "isl",
    "Output Sequence Length (tokens)": "osl",
}


def parse_json(path: Path, text: str, context: Mapping[str, Any]) -> list[Measurement]:
    """An AIPerf ``profile_export_aiperf.json`` or a vLLM ``--save-result`` file."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise WorkloadError(f"{path}:1: a JSON object expected (AIPerf or vLLM bench result)")
    if isinstance(data.get("time_to_first_token"), dict):
        return [_aiperf_json(path, data, context)]
    if "mean_ttft_ms" in data:
        return [_vllm_json(path, data, context)]
    raise WorkloadError(
        f"{path}:1: unknown JSON measurement format; accepted: AIPerf profile_export_aiperf.json "
        "(time_to_first_token.avg ...), vLLM bench serve --save-result (mean_ttft_ms ...)"
    )


def is_aiperf_csv(text: str) -> bool:
    """Whether a CSV is AIPerf's aggregated export (first header cell ``Metric``)."""
    first = text.lstrip("\ufeff").split("\n", 1)[0]
    return first.startswith("Metric,") and "Time to First Token" in text


def parse_aiperf_csv(path: Path, text: str, context: Mapping[str, Any]) -> list[Measurement]:
    """An AIPerf ``profile_export_aiperf.csv`` (its first section)."""
    found: dict[str, tuple[float, int]] = {}
    rows = list(csv.reader(text.lstrip("\ufeff").splitlines()))
    header = rows[0] if rows else []
    if "avg" not in header:
        raise WorkloadError(f"{path}:1: avg: no 'avg' column in the AIPerf metrics section")
    col = header.index("avg")
    for line, row in enumerate(rows[1:], start=2):
        if not row or not any(cell.strip() for cell in row):
            break  # the end of the first section
        key = _AIPERF_CSV_ROWS.get(row[0].strip())
        if key is None:
            continue
        raw = row[col] if col < len(row) else ""
        found[key] = (_finite(f"{path}:{line}", row[0].strip(), raw), line)
    values: dict[str, Any] = {k: v for k, (v, _) in found.items()}
    return [_measurement(path, values, context, "aiperf", line=2)]


def _aiperf_json(path: Path, data: dict[str, Any], context: Mapping[str, Any]) -> Measurement:
    values: dict[str, Any] = {}
    for key, name in (("ttft_ms", "time_to_first_token"), ("tpot_ms", "inter_token_latency"),
                      ("isl", "input_sequence_length"),
                      ("osl", "output_sequence_length")):  # fmt: skip
        entry = data.get(name)
        if isinstance(entry, dict) and "avg" in entry:
            values[key] = _finite(str(path), f"{name}.avg", entry["avg"])
    config = _dict(data.get("input_config"))
    loadgen = _dict(config.get("loadgen"))
    if loadgen.get("concurrency") is not None:
        values["concurrency"] = loadgen["concurrency"]
    names = _dict(config.get("endpoint")).get("model_names")
    if isinstance(names, list) and names and isinstance(names[0], str):
        values["model"] = names[0]
    return _measurement(path, values, context, "aiperf", line=1)


def _vllm_json(path: Path, data: dict[str, Any], context: Mapping[str, Any]) -> Measurement:
    where = str(path)
    completed = _finite(where, "completed", data.get("completed"))
    if completed < 1:
        raise WorkloadError(f"{where}: completed: got {data.get('completed')!r}; allowed: >= 1")
    values: dict[str, Any] = {
        "ttft_ms": _finite(where, "mean_ttft_ms", data.get("mean_ttft_ms")),
        "tpot_ms": _finite(where, "mean_tpot_ms", data.get("mean_tpot_ms")),
        "isl": _finite(where, "total_input_tokens", data.get("total_input_tokens")) / completed,
        "osl": _finite(where, "total_output_tokens", data.get("total_output_tokens")) / completed,
    }
    if data.get("max_concurrency") is not None:
        values["concurrency"] = data["max_concurrency"]
    if isinstance(data.get("model_id"), str) and data["model_id"]:
        values["model"] = data["model_id"]
    return _measurement(path, values, context, "vllm-bench", line=1)


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _finite(where: str, name: str, raw: object) -> float:
    try:
        x = float(raw)  # type: ignore[arg-type]  # checked below
    except (TypeError, ValueError, OverflowError):
        raise WorkloadError(f"{where}: {name}: got {raw!r}; allowed: a number") from None
    if isinstance(raw, bool) or not math.isfinite(x) or x < 0:
        raise WorkloadError(f"{where}: {name}: got {raw!r}; allowed: a finite number >= 0")
    return x


def _measurement(
    path: Path, values: dict[str, Any], context: Mapping[str, Any], client: str, *, line: int
) -> Measurement:
    """Merge the file's values over the context and check every field is there."""
    where = f"{path}:{line}"
    merged = {**{k: v for k, v in context.items() if v is not None}, **values}
    for key in ("ttft_ms", "tpot_ms", "isl", "osl"):
        if key not in merged:
            raise WorkloadError(f"{where}: {key}: missing from the file")
    for key in ("model", "gpu", "backend", "concurrency"):
        if key not in merged:
            hint = "--concurrency N" if key == "concurrency" else "--deployment D.yaml"
            raise WorkloadError(f"{where}: {key}: not in the file; give it with {hint}")
    ints = {}
    for key in ("tp", "concurrency", "isl", "osl"):
        raw = merged.get(key, 1)
        # a count (tp, concurrency) is an integer; a length is a mean, rounded to the nearest
        ok = is_number(raw) and (raw == int(raw) if key in ("tp", "concurrency") else True)
        if not ok or round(raw) < 1:
            kind = "an integer >= 1" if key in ("tp", "concurrency") else "a finite mean >= 0.5"
            raise WorkloadError(f"{where}: {key}: got {raw!r}; allowed: {kind}")
        ints[key] = round(raw)
    for key in ("model", "gpu", "backend"):
        if not isinstance(merged[key], str) or not merged[key].strip():
            raise WorkloadError(f"{where}: {key}: got {merged[key]!r}; allowed: a name")
    return Measurement(
        where=where,
        model=str(merged["model"]),
        gpu=str(merged["gpu"]),
        backend=str(merged["backend"]),
        tp=ints["tp"],
        isl=ints["isl"],
        osl=ints["osl"],
        concurrency=ints["concurrency"],
        ttft_ms=float(merged["ttft_ms"]),
        tpot_ms=float(merged["tpot_ms"]),
        dtype=str(merged.get("dtype") or "bf16"),
        client=client,  # type: ignore[arg-type]  # one of the two literal names above
        warmups=0,
    )
