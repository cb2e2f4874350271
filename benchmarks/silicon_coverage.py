"""Coverage of AIConfigurator's real-GPU measurements: which aggregated rows the simulator runs.

Every aggregated row of ``silicon_sample.csv`` is replayed as it was measured (closed loop with
``batch_size`` clients per attention-DP rank, i.e. ``batch_size x attention_dp`` per replica,
fixed ISL/OSL, prefix caching off, no host cost: :func:`dynosim.validation.validate.replay` of
the row read as :mod:`dynosim.validation.measurements` reads it, whatever client it records)
or refused with its one-line reason. Per (model, system, backend) the script prints the rows run
and refused, the TPOT and TTFT mean absolute percentage errors of the rows run, and the refusal
reasons (counted).
Nothing is fitted here: the step times are AIConfigurator's and the framework overheads are the
shipped defaults (fitted only on ``CALIBRATION_GROUPS``, among them the two MoE groups issue 8
names; groups marked ``cal`` below are those).

Run: ``.venv/bin/python benchmarks/silicon_coverage.py`` (every row: the figure; table builds
take a few seconds per new shape the first time, then come from ``~/.cache/dynosim``), or
``--sample 2`` for a quick run (at most 2 evenly spaced rows per group are replayed; every
other row is still checked for memory and for AIConfigurator's op list, so the refusals are
counted over every row, but a grid point AIConfigurator lacks shows only in a full run).
``--match TEXT`` keeps the groups whose name contains TEXT.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

from dynosim.errors import ConfigError, InfeasibleError
from dynosim.perf.aic import check_key, resolve_key
from dynosim.perf.calibration import HostCalibration
from dynosim.perf.memory import check_feasible
from dynosim.validation.measurement import Measurement
from dynosim.validation.measurements import read_measurements
from dynosim.validation.silicon import CALIBRATION_GROUPS, silicon_csv
from dynosim.validation.validate import replay, row_config

Group = tuple[str, str, str]


@dataclass
class GroupResult:
    """Rows of one (model, system, backend) group."""

    rows: int = 0
    sampled_out: int = 0
    tpot_err: list[float] = field(default_factory=list)
    ttft_err: list[float] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)

    @property
    def run(self) -> int:
        """Rows replayed."""
        return len(self.tpot_err)


def _reason(text: str) -> str:
    """A refusal reason with its numbers blanked, so that like reasons count together."""
    text = re.sub(r"MoeKey \{.*?\}", "MoeKey {...}", text)
    text = re.sub(r"(Context|Generation|Dsa)Key \{.*?\}", r"\1Key {...}", text)
    text = re.sub(r"AIConfigurator cannot model .*?, (bf16|fp8|fp8_block|nvfp4|mxfp4|int4_wo): ",
                  "AIConfigurator cannot model the shape: ", text)  # fmt: skip
    text = re.sub(r" at /\S+", "", text)
    return re.sub(r"\d+(\.\d+)?", "N", text)[:200]


def _sample(rows: list[Measurement], n: int) -> list[Measurement]:
    if n <= 0 or len(rows) <= n:
        return rows
    step = len(rows) / n
    return [rows[int(i * step)] for i in range(n)]


def run(sample: int, match: str, rounds: int) -> dict[Group, GroupResult]:
    """Replay (a sample of) every aggregated row; refusals are counted over every row."""
    results: dict[Group, GroupResult] = defaultdict(GroupResult)
    buildable: dict[Group, list[Measurement]] = defaultdict(list)
    for m in read_measurements(silicon_csv()):
        group = (m.model, m.gpu, m.backend)
        if m.mode != "agg" or match not in " ".join(group):
            continue
        res = results[group]
        res.rows += 1
        if m.refused is not None:
            res.refused[_reason(m.refused)] += 1
            continue
        r = replace(m, client=None)  # the closed loop of its batch, whoever measured it
        try:
            row_config(r)
        except ConfigError as err:
            res.refused[_reason(str(err))] += 1
            continue
        buildable[group].append(r)
    for group, rows in buildable.items():
        res = results[group]
        chosen = _sample(rows, sample)
        picked = {id(r) for r in chosen}
        t0 = time.perf_counter()
        for r in rows:  # the rows not replayed: refused if their memory or AIC op list is
            if id(r) in picked:
                continue
            try:
                config = row_config(r)
                check_feasible(config)
                check_key(resolve_key(config))
            except (ConfigError, InfeasibleError) as err:
                res.refused[_reason(str(err))] += 1
                continue
            res.sampled_out += 1
        for r in chosen:
            out = replay(r, rounds=rounds, host=HostCalibration(), unrecorded_client="closed-loop")
            if out.refused is not None:
                res.refused[_reason(out.refused)] += 1
                continue
            res.tpot_err.append(out.error("tpot"))
            res.ttft_err.append(out.error("ttft"))
        print(f"  {' / '.join(group)}: {res.run} run in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)  # fmt: skip
    return results


def _mape(errs: list[float]) -> str:
    return f"{statistics.mean(map(abs, errs)):6.1%}" if errs else "     -"


def report(results: dict[Group, GroupResult]) -> dict[str, object]:
    """Print the per-group table and the totals; return them as plain data."""
    cal = set(CALIBRATION_GROUPS)
    print(f"{'model / system / backend':66s} {'rows':>5s} {'run':>5s} {'refused':>7s} "
          f"{'TPOT':>6s} {'TTFT':>6s}")  # fmt: skip
    total = ran = refused = skipped = 0
    out: list[dict[str, object]] = []
    for group in sorted(results):
        res = results[group]
        n_ref = sum(res.refused.values())
        total += res.rows
        ran += res.run
        refused += n_ref
        skipped += res.sampled_out
        tag = " cal" if group in cal else ""
        print(f"{' / '.join(group) + tag:66s} {res.rows:5d} {res.run:5d} {n_ref:7d} "
              f"{_mape(res.tpot_err)} {_mape(res.ttft_err)}")  # fmt: skip
        for reason, n in res.refused.most_common():
            print(f"      refused {n:4d}: {reason}")
        out.append({
            "model": group[0], "system": group[1], "backend": group[2], "rows": res.rows,
            "run": res.run, "refused": n_ref, "not_sampled": res.sampled_out,
            "tpot_mape": statistics.mean(map(abs, res.tpot_err)) if res.tpot_err else None,
            "ttft_mape": statistics.mean(map(abs, res.ttft_err)) if res.ttft_err else None,
            "reasons": dict(res.refused), "calibration": group in cal,
        })  # fmt: skip
    runnable = total - refused
    all_tpot = [e for r in results.values() for e in r.tpot_err]
    all_ttft = [e for r in results.values() for e in r.ttft_err]
    print(f"\naggregated rows {total}: runnable {runnable} ({runnable / max(total, 1):.1%}), "
          f"refused {refused}, replayed {ran} (not sampled {skipped}); "
          f"TPOT MAPE {_mape(all_tpot).strip()}, TTFT MAPE {_mape(all_ttft).strip()}")  # fmt: skip
    return {"groups": out, "rows": total, "runnable": runnable, "refused": refused, "run": ran}


def main(argv: list[str] | None = None) -> None:
    """Parse the flags, replay, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=0, help="rows per group (0: all)")
    parser.add_argument("--match", default="", help="only groups whose name contains this")
    parser.add_argument("--rounds", type=int, default=4, help="requests per client")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    data = report(run(args.sample, args.match, args.rounds))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)


if __name__ == "__main__":
    main()
