"""Measured benchmark points a user can check the simulator against.

Formats, told apart by their content (tool result files: :mod:`dynosim.validation.tool_exports`):

* AIConfigurator's ``silicon_sample.csv`` (``model_path, system, backend, mode, isl, osl,
  batch_size, tp_size, ..., silicon_ttft_ms, silicon_tpot_ms``). The client that produced a row
  is inferred from ``silicon_data_source``: ``db-dump/...`` and ``source_file=...`` rows come
  from SemiAnalysis InferenceX runs (client ``inferencex``), except those naming a file on
  someone's machine (``source_file=/Users/...``: AIConfigurator's own runs); other sources
  record no client, and are replayed with the calibration profile's ``unrecorded_client`` for
  their backend (a plain closed loop of ``batch_size`` clients unless the profile says
  otherwise). InferenceX rows whose source records no ``measured=`` date in or after 2026-01
  ran without warm-up requests (the client added ``--num-warmups 2*c`` then). A row's
  deployment (dtype, expert and attention-DP parallelism; ``batch_size`` is per DP rank) is
  read as :func:`dynosim.validation.silicon.parse_row` reads it for the coverage benchmark;
  a disaggregated row's prefill and decode pools from its ``prefill_*`` / ``decode_*``
  columns (:func:`~dynosim.validation.silicon.parse_disagg_pools`; most such rows record no
  worker counts and are refused). Pipeline parallelism and what the simulator cannot build
  are refused with the reason.
* A plain CSV: ``model,gpu,backend,tp,isl,osl,concurrency,ttft_ms,tpot_ms`` and optionally
  ``dtype``, ``client`` (inferencex | vllm-bench | aiperf), ``max_num_seqs``,
  ``max_num_batched_tokens``, ``enable_prefix_caching``, ``warmups``.
* AIPerf ``profile_export_aiperf.json`` / ``.csv`` and vLLM ``bench serve --save-result`` JSON:
  one point per file, the deployment fields from a context (``--deployment``).

A malformed row is a one-line ``WorkloadError`` naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from dynosim.errors import ConfigError, WorkloadError
from dynosim.validation.measurement import Measurement
from dynosim.validation.silicon import parse_disagg_pools, parse_row, row_kv_dtype
from dynosim.validation.tool_exports import is_aiperf_csv, parse_aiperf_csv, parse_json
from dynosim.workload.client import CLIENTS, ClientName

__all__ = ["PLAIN_FIELDS", "PLAIN_OPTIONAL", "Measurement", "read_measurements"]

PLAIN_FIELDS = ("model", "gpu", "backend", "tp", "isl", "osl", "concurrency", "ttft_ms", "tpot_ms")
PLAIN_OPTIONAL = ("dtype", "client", "max_num_seqs", "max_num_batched_tokens",
                  "enable_prefix_caching", "warmups")  # fmt: skip


def read_measurements(
    path: str | Path, context: Mapping[str, Any] | None = None
) -> list[Measurement]:
    """Every row of a measurement file (see the module docstring).

    ``context`` (``model``, ``gpu``, ``backend``, ``tp``, ``dtype``, ``concurrency``) fills
    what a benchmark tool's result file lacks (:mod:`dynosim.validation.tool_exports`).

    Raises:
        WorkloadError: unreadable file, unknown header, or a malformed row (``FILE:LINE: ...``).
    """
    p = Path(path)
    try:
        with p.open(newline="") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"{p}: cannot read measurements: {exc}") from None
    if text.lstrip("\ufeff").lstrip().startswith("{"):
        return parse_json(p, text, context or {})
    if is_aiperf_csv(text):
        return parse_aiperf_csv(p, text, context or {})
    reader = csv.DictReader(text.splitlines())
    header = set(reader.fieldnames or ())
    if {"model_path", "system", "silicon_ttft_ms"} <= header:
        return [_silicon(p, i + 2, r) for i, r in enumerate(reader)]
    if set(PLAIN_FIELDS) <= header:
        return [_plain(p, i + 2, r) for i, r in enumerate(reader)]
    raise WorkloadError(
        f"{p}:1: unknown measurement format; accepted: AIConfigurator's silicon_sample.csv, a "
        f"CSV with the columns {','.join(PLAIN_FIELDS)}, AIPerf's profile_export_aiperf.json or "
        ".csv, vLLM bench serve --save-result JSON"
    )


def _num(where: str, row: dict[str, str], key: str, kind: type, low: float) -> Any:
    raw = (row.get(key) or "").strip()
    try:
        value = kind(raw)
    except ValueError:
        raise WorkloadError(f"{where}: {key}: got {raw!r}; allowed: a number") from None
    if not value >= low or value != value or value in (float("inf"),):
        raise WorkloadError(f"{where}: {key}: got {raw!r}; allowed: a finite number >= {low:g}")
    return value


def _silicon(path: Path, line: int, r: dict[str, str]) -> Measurement:
    where = f"{path}:{line}"
    source = r.get("silicon_data_source") or ""
    client: ClientName | None = (
        "inferencex"
        if source.startswith(("db-dump/", "source_file=")) and not _internal(source)
        else None
    )
    warmups = None if client is None or _measured_since(source, "2026-01") else 0
    base = Measurement(
        where=where,
        model=r.get("model_path") or "",
        gpu=r.get("system") or "",
        backend=r.get("backend") or "",
        tp=_num(where, r, "tp_size", int, 1) if r.get("tp_size") else 1,
        isl=_num(where, r, "isl", int, 1),
        osl=_num(where, r, "osl", int, 1),
        concurrency=_num(where, r, "batch_size", int, 1) if r.get("batch_size") else 1,
        ttft_ms=_num(where, r, "silicon_ttft_ms", float, 0.0),
        tpot_ms=_num(where, r, "silicon_tpot_ms", float, 0.0),
        mode=r.get("mode") or "agg",
        client=client,
        warmups=warmups,
        source=source.split(";", 1)[0].strip().removeprefix("source_file="),
    )
    if base.mode == "disagg":
        try:
            dtype, prefill, decode = parse_disagg_pools(r)
        except (ConfigError, KeyError, ValueError) as exc:
            return replace(base, refused=f"mode disagg: {exc}")
        return replace(
            base,
            concurrency=decode.batch_size * decode.workers * decode.attention_dp,
            dtype=dtype,
            pools=(prefill, decode),
            kv_cache_dtype=row_kv_dtype(base.backend, dtype),
        )
    if base.mode != "agg":
        return replace(base, refused=f"mode {base.mode}: allowed: agg | disagg")

    try:
        row = parse_row(r)
    except (ConfigError, KeyError, ValueError) as exc:
        return replace(base, refused=str(exc))
    return replace(
        base,
        concurrency=row.concurrency,  # batch_size x attention_dp: the clients of all ranks
        tp=row.tp,  # attention TP per DP rank, as parse_row reads the row's GPUs
        dtype=row.dtype,
        ep=row.ep,
        moe_tp=row.moe_tp,
        attention_dp=row.attention_dp,
        kv_cache_dtype=row_kv_dtype(row.backend, row.dtype),
    )


def _internal(source: str) -> bool:
    """Whether a row's source names a file on someone's machine (``source_file=/Users/...``).

    Such rows (AIConfigurator's own gap-analysis runs, among them every calibration group)
    record no client or engine settings (issue 9); InferenceX's files are named by date.
    """
    return source.startswith("source_file=/")


def _measured_since(source: str, month: str) -> bool:
    """Whether a row's source records a ``measured=YYYY-MM-DD`` date in or after ``month``.

    InferenceX added ``--num-warmups 2*c`` in 2026-01; a row without a date or from before ran
    with no warm-up, so its first wave of ``c`` simultaneous prompts is in the means.
    """
    match = re.search(r"measured=(\d{4}-\d{2})", source)
    return match is not None and match.group(1) >= month


def _plain(path: Path, line: int, r: dict[str, str]) -> Measurement:
    where = f"{path}:{line}"
    for key in ("model", "gpu", "backend"):
        if not (r.get(key) or "").strip():
            raise WorkloadError(f"{where}: {key}: got ''; allowed: a name")
    name = (r.get("client") or "").strip() or None
    if name is not None and name not in CLIENTS:
        raise WorkloadError(f"{where}: client: got {name!r}; allowed: {' | '.join(CLIENTS)}")
    client: ClientName | None = name  # type: ignore[assignment]  # checked against CLIENTS
    engine: dict[str, Any] = {}
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        if (r.get(key) or "").strip():
            engine[key] = _num(where, r, key, int, 1)
    caching = (r.get("enable_prefix_caching") or "").strip().lower()
    if caching:
        if caching not in ("true", "false"):
            raise WorkloadError(
                f"{where}: enable_prefix_caching: got {caching!r}; allowed: true | false"
            )
        engine["enable_prefix_caching"] = caching == "true"
    return Measurement(
        where=where,
        model=r["model"].strip(),
        gpu=r["gpu"].strip(),
        backend=r["backend"].strip(),
        tp=_num(where, r, "tp", int, 1),
        isl=_num(where, r, "isl", int, 1),
        osl=_num(where, r, "osl", int, 1),
        concurrency=_num(where, r, "concurrency", int, 1),
        ttft_ms=_num(where, r, "ttft_ms", float, 0.0),
        tpot_ms=_num(where, r, "tpot_ms", float, 0.0),
        dtype=(r.get("dtype") or "").strip() or "bf16",
        client=client,
        warmups=_num(where, r, "warmups", int, 0) if (r.get("warmups") or "").strip() else None,
        engine=engine,
    )
