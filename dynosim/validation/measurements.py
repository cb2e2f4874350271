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
  ``max_num_batched_tokens``, ``enable_prefix_caching``, ``async_scheduling`` (vLLM: false for
  a release before 0.14 or ``--no-async-scheduling``), ``warmups``.
* AIPerf ``profile_export_aiperf.json`` / ``.csv`` and vLLM ``bench serve --save-result`` JSON:
  one point per file, the deployment fields from a context (``--deployment``).

A malformed row is a one-line ``WorkloadError`` naming the file, the line and the field. The
file is read as a stream with a size and a row bound, and every point's figures are checked
against :mod:`dynosim.workload.limits` (:func:`check_point`); :func:`check_replay` refuses a
replay whose projected work (clients x rounds x tokens) is too large before it starts.
"""

from __future__ import annotations

import csv
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from dynosim.checks import integer, is_number
from dynosim.errors import ConfigError, WorkloadError
from dynosim.validation.measurement import Measurement
from dynosim.validation.recipes import (
    RowRecipe,
    family_attention_dp_config,
    family_kv_cache_dtype,
    recipe_flags,
    served_fp8_scales,
)
from dynosim.validation.silicon import parse_disagg_pools, parse_row, row_kv_dtype
from dynosim.validation.tool_exports import is_aiperf_csv, parse_aiperf_csv, parse_json
from dynosim.validation.twins import adopt_twins
from dynosim.workload.client import CLIENTS, ClientName
from dynosim.workload.limits import (
    CLIENTS_WHY,
    MAX_CLIENTS,
    MAX_MEASUREMENT_BYTES,
    MAX_MEASUREMENT_ROWS,
    MAX_REPLAY_TOKENS,
    MAX_ROUNDS,
    MAX_TIME_S,
    MAX_TOKENS,
    MAX_TP,
)

__all__ = [
    "PLAIN_FIELDS",
    "PLAIN_OPTIONAL",
    "Measurement",
    "check_point",
    "check_replay",
    "read_measurements",
]

PLAIN_FIELDS = ("model", "gpu", "backend", "tp", "isl", "osl", "concurrency", "ttft_ms", "tpot_ms")
PLAIN_OPTIONAL = ("dtype", "client", "max_num_seqs", "max_num_batched_tokens",
                  "enable_prefix_caching", "async_scheduling", "warmups")  # fmt: skip


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
        info = p.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block, /dev/zero never ends
            raise WorkloadError(f"{p}: cannot read measurements: not a regular file")
        size = info.st_size
        if size > MAX_MEASUREMENT_BYTES:
            raise WorkloadError(
                f"{p}: size: got {size:,} bytes; allowed: at most {MAX_MEASUREMENT_BYTES:,} "
                "bytes (a measurement file of at most "
                f"{MAX_MEASUREMENT_ROWS:,} rows)"
            )
        with p.open(newline="", encoding="utf-8") as f:
            head = f.read(4096).lstrip("\ufeff")
            f.seek(0)
            if head.lstrip().startswith("{"):
                return [check_point(m) for m in parse_json(p, f.read(), context or {})]
            if head.startswith("Metric,"):
                text = f.read()
                if is_aiperf_csv(text):
                    return [check_point(m) for m in parse_aiperf_csv(p, text, context or {})]
                f.seek(0)
            return _read_csv(p, f)
    except OSError as exc:
        raise WorkloadError(f"{p}: cannot read measurements: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{p}: cannot read measurements: not UTF-8 ({exc.reason})") from None


def _read_csv(p: Path, f: TextIO) -> list[Measurement]:
    """A silicon or plain CSV, row by row (at most :data:`MAX_MEASUREMENT_ROWS` rows)."""
    reader = csv.reader(f)
    try:
        header = [h.strip().lstrip("\ufeff") for h in next(reader, [])]
        duplicated = sorted({h for h in header if header.count(h) > 1})
        if duplicated:
            raise WorkloadError(f"{p}:1: {duplicated[0]}: a column named twice in the header")
        if {"model_path", "system", "silicon_ttft_ms"} <= set(header):
            parse = _silicon
        elif set(PLAIN_FIELDS) <= set(header):
            parse = _plain
        else:
            raise WorkloadError(
                f"{p}:1: unknown measurement format; accepted: AIConfigurator's "
                f"silicon_sample.csv, a CSV with the columns {','.join(PLAIN_FIELDS)}, AIPerf's "
                "profile_export_aiperf.json or .csv, vLLM bench serve --save-result JSON"
            )
        out: list[Measurement] = []
        for cells in reader:
            line = reader.line_num
            if not any(c.strip() for c in cells):
                continue  # a blank line
            if len(cells) != len(header):
                raise WorkloadError(
                    f"{p}:{line}: got {len(cells)} cells; allowed: one per header column "
                    f"({len(header)})"
                )
            if len(out) >= MAX_MEASUREMENT_ROWS:
                raise WorkloadError(
                    f"{p}:{line}: rows: more than {MAX_MEASUREMENT_ROWS:,}; allowed: at most "
                    f"{MAX_MEASUREMENT_ROWS:,} rows a measurement file"
                )
            out.append(check_point(parse(p, line, dict(zip(header, cells, strict=True)))))
    except csv.Error as exc:
        raise WorkloadError(f"{p}:{reader.line_num}: malformed CSV: {exc}") from None
    if not out:
        raise WorkloadError(f"{p}: rows: none; allowed: a header and at least one row")
    return adopt_twins(out) if parse is _silicon else out


def check_point(m: Measurement) -> Measurement:
    """``m`` if its figures are within the bounds of :mod:`dynosim.workload.limits`.

    Every reader's points pass here: a refused row (the simulator cannot build it) is kept for
    the report, a figure out of range is a one-line error naming the file, line and field.
    """

    def bad(name: str, value: object, allowed: str) -> WorkloadError:
        return WorkloadError(f"{m.where}: {name}: got {value!r}; allowed: {allowed}")

    for name, value, high, why in (
        ("tp", m.tp, MAX_TP, ""),
        ("concurrency", m.concurrency, MAX_CLIENTS, f" ({CLIENTS_WHY})"),
        ("isl", m.isl, MAX_TOKENS, ""),
        ("osl", m.osl, MAX_TOKENS, ""),
    ):
        if not 1 <= value <= high:
            raise bad(name, value, f"an integer in [1, {high:,}]{why}")
    if not (is_number(m.ttft_ms) and 0 < m.ttft_ms < MAX_TIME_S * 1e3):
        raise bad("ttft_ms", m.ttft_ms, "a finite number of milliseconds > 0")
    if not (is_number(m.tpot_ms) and 0 <= m.tpot_ms < MAX_TIME_S * 1e3) or (
        m.tpot_ms == 0 and m.osl > 1
    ):
        raise bad("tpot_ms", m.tpot_ms, "a finite number of milliseconds > 0 (>= 0 for osl 1)")
    return m


def check_replay(rows: Sequence[Measurement], rounds: int) -> None:
    """Refuse a replay whose projected work is beyond :data:`MAX_REPLAY_TOKENS` a row.

    ``rounds``: requests a client sends (``--rounds``, at most :data:`MAX_ROUNDS`). A row's
    work is its clients x rounds x (input + output tokens): every token is stepped.
    """
    integer("--rounds", rounds, 1, MAX_ROUNDS)
    for m in rows:
        work = (m.concurrency + m.queued) * rounds * (m.isl + m.osl)
        if work > MAX_REPLAY_TOKENS:
            raise WorkloadError(
                f"{m.where}: concurrency x rounds x (isl + osl): got {m.concurrency:,} x "
                f"{rounds:,} x {m.isl + m.osl:,} = {work:,} tokens; allowed: at most "
                f"{MAX_REPLAY_TOKENS:,} tokens a replayed point (fewer --rounds)"
            )


def _num(where: str, row: dict[str, str], key: str, kind: type, low: float) -> Any:
    raw = (row.get(key) or "").strip()
    if len(raw) > 40:  # int() of a 5,000-digit string is slow and no figure needs it
        raise WorkloadError(f"{where}: {key}: got {raw[:20]!r}...; allowed: a number")
    try:
        value = kind(raw)
    except ValueError:
        raise WorkloadError(f"{where}: {key}: got {raw!r}; allowed: a number") from None
    if not is_number(value) or not value >= low:
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
    if client == "inferencex" and base.mode == "agg" and base.gpu in _DISAGG_ONLY_SYSTEMS:
        return replace(base, refused=_DISAGG_ONLY_WHY.format(gpu=base.gpu, tp=base.tp))
    if base.backend == "vllm" and client is None and _before(r.get("backend_version"), (0, 14)):
        base = replace(base, engine={"async_scheduling": False})
    recipe = recipe_flags(r) if client == "inferencex" else None
    family = family_kv_cache_dtype(r) if client == "inferencex" and recipe is None else None
    if recipe is not None:
        base = replace(base, engine={**base.engine, **recipe.engine}, recipe=recipe.source)
    if base.mode == "disagg":
        try:
            dtype, prefill, decode = parse_disagg_pools(r)
        except (ConfigError, KeyError, ValueError, OverflowError) as exc:
            return replace(base, refused=f"mode disagg: {exc}")
        return replace(
            base,
            concurrency=decode.batch_size * decode.workers * decode.attention_dp,
            dtype=dtype,
            pools=(prefill, decode),
            kv_cache_dtype=_kv_dtype(recipe, base.backend, dtype),
        )
    if base.mode != "agg":
        return replace(base, refused=f"mode {base.mode}: allowed: agg | disagg")

    try:
        row = parse_row(r)
    except (ConfigError, KeyError, ValueError, OverflowError) as exc:
        return replace(base, refused=str(exc))
    m = replace(
        base,
        concurrency=row.concurrency,  # batch_size x attention_dp: the clients of all ranks
        tp=row.tp,  # attention TP per DP rank, as parse_row reads the row's GPUs
        dtype=row.dtype,
        ep=row.ep,
        moe_tp=row.moe_tp,
        attention_dp=row.attention_dp,
        # no recipe known: the KV dtype all of the row's family's recipes pass, if any
        kv_cache_dtype=family or _kv_dtype(recipe, row.backend, row.dtype),
        fp8_scales=served_fp8_scales(base.model, row.dtype) if client == "inferencex" else None,
    )
    if recipe is None and m.attention_dp > 1 and m.backend == "trtllm":
        m = replace(m, engine={**m.engine, **family_attention_dp_config(r)})
    return m if recipe is None else _as_recipe_ran(m, recipe)


def _as_recipe_ran(m: Measurement, recipe: RowRecipe) -> Measurement:
    """``m`` with its recipe's concurrency and (vLLM, TensorRT-LLM) command-line parallelism.

    SGLang's ``--max-running-requests`` is the server's: each DP-attention rank admits that
    over the DP size (``TpModelWorker``); vLLM's ``--max-num-seqs`` and TRT-LLM's
    ``max_batch_size`` are per rank already.
    """
    m = replace(
        m,
        concurrency=recipe.concurrency,
        speculative=recipe.speculative,
        moe_activation=recipe.moe_activation,
    )
    if (p := recipe.parallel) is not None:
        m = replace(m, tp=p["tp"], ep=p["ep"], moe_tp=p["moe_tp"], attention_dp=p["attention_dp"])
    seqs = m.engine.get("max_num_seqs")
    if m.backend == "sglang" and seqs is not None and m.attention_dp > 1:
        m = replace(m, engine={**m.engine, "max_num_seqs": max(1, seqs // m.attention_dp)})
    return m


def _kv_dtype(recipe: RowRecipe | None, backend: str, dtype: str) -> str | None:
    """The row's KV-cache dtype: its recipe's if it names one, else the backend's default."""
    if recipe is not None and recipe.kv_cache_dtype is not None:
        return recipe.kv_cache_dtype
    return row_kv_dtype(backend, dtype)


def _before(version: str | None, release: tuple[int, int]) -> bool:
    """Whether a ``backend_version`` such as ``0.12.0`` names a release before ``release``.

    A vLLM row that records no client (AIConfigurator's own runs, which record no engine
    flags either) ran the release's defaults: before vLLM 0.14.0 that is no async scheduling
    (its release notes: "Async scheduling is now enabled by default", PR #27614). Versions
    that do not parse (empty, ``nightly-...``) are not before anything.
    """
    found = re.match(r"(\d+)\.(\d+)", (version or "").strip())
    return found is not None and (int(found.group(1)), int(found.group(2))) < release


_DISAGG_ONLY_SYSTEMS = frozenset({"gb200", "gb300"})
"""Systems InferenceX benchmarked only as multi-node disaggregated Dynamo deployments.

Its GB200 runner (``runners/launch_gb200-nv.sh``, commit 0ba7aa3 of 2025-11-17) launches every
DeepSeek-R1 point through ``submit_disagg.sh``: context servers of 4 GPUs (one tray) and
generation servers of TP 8-32, e.g. 8k/1k c = 2150 as 6 context + 1 DEP-8 generation server
= 32 GPUs. AIConfigurator's ``2026-04-06.csv`` rows record some of these as ``agg`` with that
total in ``tp_size`` (12, 20, 24, 28, 32, 36, 40, 48, 52, 64, 72 = 4 x context + generation
GPUs): an aggregated replay on that many GPUs is not the deployment that ran, and its pools
are not in the row. Such rows are refused, not replayed.
"""

_DISAGG_ONLY_WHY = (
    "mode agg on {gpu}: InferenceX ran {gpu} only as disaggregated multi-node deployments "
    "(runners/launch_gb200-nv.sh: submit_disagg.sh); tp_size {tp} is their total GPU count "
    "and the row records no prefill/decode pools"
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
    for key in ("enable_prefix_caching", "async_scheduling"):
        flag = (r.get(key) or "").strip().lower()
        if flag:
            if flag not in ("true", "false"):
                raise WorkloadError(f"{where}: {key}: got {flag!r}; allowed: true | false")
            engine[key] = flag == "true"
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
