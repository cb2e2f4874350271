"""Refit the shipped calibration profile on the calibration groups and print the errors.

The fit itself is ``dynosim calibrate`` (:mod:`dynosim.validation.calibrate`): every row of the
calibration groups of AIConfigurator's ``silicon_sample.csv``

* meta-llama/Llama-3.1-8B-Instruct / h100_sxm / trtllm / agg
* Qwen/Qwen3-32B / h100_sxm / trtllm / agg   (fp8)
* Qwen/Qwen3-32B / h100_sxm / sglang / agg

is replayed with the client model that explains its backend's rows best: they record no client
(their sources are files on someone's machine), so each backend is fitted as a fixed-length
closed loop and as InferenceX's client (all clients at once, 10 x c prompts, lengths jittered in
[0.8, 1] x nominal, no warm-ups) and the smaller held-out error wins (SGLang: closed loop;
TRT-LLM: InferenceX); the step overhead, kernel factors and host per-request cost are fitted by
least squares on the simulator's own step schedule. All other rows are held out
(``dynosim validate``).

This script prints the before / after / leave-one-configuration-out errors without writing the
shipped profile (``--out`` a scratch file); to regenerate the shipped one run the command in
``search/commands/calibrate.py``'s docstring (``--out dynosim/perf/profiles/default.yaml``).

Run: ``.venv/bin/python benchmarks/calibrate_overhead.py [--out PROFILE.yaml]``.
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
