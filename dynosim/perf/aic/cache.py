"""The tables of a key: from memory, else from the disk cache, else built (and cached).

Tables are cached in memory and on disk as ``<cache>/aic/<key>.npz`` where ``<cache>`` is
``$DYNOSIM_CACHE_DIR`` or ``~/.cache/dynosim``; the key includes the aiconfigurator-core and
table-format versions, so stale files are never read. A file of estimated tables records why
(``estimated``) and by which rule (``estimate_format``). :func:`check_key` is the cheap
feasibility test: a cached file, else one walk of the key's op lists.
"""

from __future__ import annotations

import contextlib
import functools
import re

import numpy as np

from dynosim.cache import write_atomic
from dynosim.errors import ConfigError
from dynosim.perf.aic.build import F64, _estimable, _walk, build_tables
from dynosim.perf.aic.key import AicKey, cache_dir
from dynosim.perf.aic.ops import LACKS_DATA

_ESTIMATE_FORMAT = 2  # how estimated tables were made: 1 HYBRID; 2 MoE from expert parallelism
_ADP_TABLE_NAMES = ("moe_us", "dec_moe_us")
"""Tables a key with attention DP has too (files from before them are rebuilt)."""
_TABLE_NAMES = (
    "tok_grid",
    "nonattn_us",
    "req_grid",
    "logits_us",
    "chunk_grid",
    "ctx_grid",
    "prefill_us",
    "dec_n_grid",
    "dec_s_grid",
    "decode_us",
    "dec_nonattn_us",
)


@functools.lru_cache(maxsize=256)
def check_key(key: AicKey) -> None:
    """Compile ``key`` and walk its op lists once (a second, no tables): cheap feasibility.

    With ``database_mode: hybrid`` an op AIConfigurator has no measurements for is checked
    again in its HYBRID mode (estimated), so only what cannot be estimated either is refused.

    Raises:
        ConfigError: AIConfigurator cannot build the engine or lacks data for one of its ops.
    """
    path = cache_dir() / key.filename()
    if path.exists():
        if key.database_mode == "silicon":
            aic_tables(key)  # refuses estimated tables
        return
    try:
        _walk(key, "SILICON")
    except ConfigError as err:
        if not _estimable(key, err):
            raise
        _walk(key, "HYBRID")


def aic_tables(key: AicKey) -> dict[str, F64]:
    """The tables of ``key`` (:func:`load_tables` without the estimate note)."""
    return load_tables(key)[0]


@functools.lru_cache(maxsize=64)
def load_tables(key: AicKey) -> tuple[dict[str, F64], str]:
    """Tables for ``key``: from memory, else from the disk cache, else built (and cached).

    Returns them and why some of them are AIConfigurator estimates, not measurements ("" if
    none: HYBRID mode, a proxy kernel). A key AIConfigurator cannot build is remembered (in
    memory): asking again raises the same ConfigError at once instead of re-evaluating the grid
    up to the missing point.

    Raises:
        ConfigError: AIConfigurator cannot build the engine or lacks data on the grid (and,
            with ``database_mode: silicon``, when the tables on disk were estimated).
    """
    path = cache_dir() / key.filename()
    tables: dict[str, F64] | None = None
    note = ""
    try:
        with np.load(path, allow_pickle=False) as data:
            names = _TABLE_NAMES + (_ADP_TABLE_NAMES if key.attention_dp > 1 else ())
            tables = {name: np.asarray(data[name], dtype=np.float64) for name in names}
            note = str(data["estimated"]) if "estimated" in data.files else ""
            if note and int(data["estimate_format"]) != _ESTIMATE_FORMAT:
                tables = None  # estimated by an older rule: rebuild
    except (OSError, KeyError, ValueError):
        tables = None  # missing or unreadable: rebuild
    if tables is None:
        built = _build_or_error(key)
        if isinstance(built, ConfigError):
            raise ConfigError(built.field, built.value, built.allowed)
        tables, note = built
        marks = {"estimated": np.array(note), "estimate_format": np.array(_ESTIMATE_FORMAT)}
        saved = {**tables, **marks}
        with contextlib.suppress(OSError):  # a read-only cache is not an error
            write_atomic(path, lambda f: np.savez(f, **saved))  # type: ignore[arg-type]
    if note and key.database_mode == "silicon":
        raise ConfigError("timing", "aic", f"roofline ({LACKS_DATA}: {note})")
    return tables, note


class EstimatedTimingWarning(UserWarning):
    """Some step times of a deployment are AIConfigurator's estimates, not measurements."""

    def __init__(self, key: AicKey, note: str) -> None:
        """Say which key and which missing data (``note``, AIConfigurator's words)."""
        shape = f"tp={key.tp} ep={key.ep} moe_tp={key.moe_tp} attention_dp={key.attention_dp}"
        super().__init__(
            f"{key.aic_model} on {key.gpu} with {key.backend} ({shape}, {key.dtype}): step "
            f"times partly estimated, not measured: {note} (aic_database_mode: hybrid; "
            "'silicon' refuses instead)"
        )


@functools.lru_cache(maxsize=16)
def _build_or_error(key: AicKey) -> tuple[dict[str, F64], str] | ConfigError:
    """The tables of ``key`` and why any were estimated, or the error that refuses it.

    Measured data first; where AIConfigurator lacks a point and ``key`` allows it, the whole
    set again in HYBRID mode (its ops with data stay measured).
    """
    try:
        return build_tables(key)
    except ConfigError as err:
        if not _estimable(key, err):
            return err
        missing = str(err.allowed).removeprefix(f"roofline ({LACKS_DATA}: ").removesuffix(")")
        missing = re.sub(r" at /\S+", "", missing)  # the data file AIConfigurator looked in
        missing = f"no measurements ({missing}): estimated by AIConfigurator's HYBRID mode"
    try:
        tables, note = build_tables(key, "HYBRID")
    except ConfigError as err:
        return err
    return tables, "; ".join(n for n in (note, missing) if n)
