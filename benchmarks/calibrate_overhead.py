"""Refit the shipped calibration profile on the calibration groups and print the errors.

The fit itself is ``dynosim calibrate`` (:mod:`dynosim.validation.calibrate`) on every
aggregated row of the 11 calibration groups of AIConfigurator's ``silicon_sample.csv``
(``CALIBRATION_GROUPS`` in :mod:`dynosim.validation.silicon`, issue 19: one or more per backend
and GPU generation):

* TRT-LLM: Llama-3.1-8B-Instruct / h100_sxm, Qwen3-32B / h100_sxm, Qwen3-235B-A22B-FP8 /
  h100_sxm, gpt-oss-120b / b200_sxm, DeepSeek-V3 / b200_sxm
* SGLang: Qwen3-32B / h100_sxm, DeepSeek-R1 / b200_sxm
* vLLM: Qwen3-235B-A22B-FP8 / h200_sxm, gpt-oss-120b / h100_sxm, MiniMax-M2.5 / b200_sxm,
  Llama-3.1-70B / b200_sxm

Rows that record no client (AIConfigurator's own files) are replayed with the client model
that explains each file best (closed loop, InferenceX's client, or ``queued``); InferenceX rows
with their recorded client. Per backend the step overhead, kernel factors (per GPU generation
where a generation has enough rows of two configurations or more, else the backend's; the
kernel factors kept in their physical range 0.5 to 2), host delays and streaming cost are
fitted by least squares on the simulator's own step schedule,
and the fit prints TTFT/TPOT per group before, after and leave-one-configuration-out. Every
other row is held out (``benchmarks/fidelity.py``).

Run: ``.venv/bin/python benchmarks/calibrate_overhead.py [--out PROFILE.yaml]``; with ``--out
dynosim/perf/profiles/default.yaml`` it regenerates the shipped profile (the command it runs is
written into the profile's header). Without ``--out`` the profile is printed, not written.
On this 2-core VM it takes 15-60 minutes depending on load.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from dynosim.validation.silicon import CALIBRATION_GROUPS, silicon_csv
from search.cli import main as dynosim


def main() -> None:
    """Fit on the calibration groups; print the table (``dynosim calibrate``'s)."""
    args = sys.argv[1:]
    out = args[args.index("--out") + 1] if "--out" in args else None
    with tempfile.TemporaryDirectory() as tmp:
        target = out or str(Path(tmp) / "profile.yaml")
        groups = [w for g in CALIBRATION_GROUPS for w in ("--group", "/".join(g))]
        code = dynosim(["calibrate", str(silicon_csv()), *groups, "--out", target])
        if code == 0 and out is None:
            print(Path(target).read_text())
    sys.exit(code)


if __name__ == "__main__":
    main()
