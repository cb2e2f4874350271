"""``dynosim simulate --trace`` imports only what replaying a trace needs (its start-up time).

Issue 21 counts the whole process on the Mooncake trace: every module imported on that path is
compiled or unmarshalled, and every dataclass in it built, in each process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llama8b_h200_vllm.yaml"
TRACE = ROOT / "tests" / "data" / "traces" / "mooncake_small.jsonl"

NOT_IMPORTED = (
    # the autotuner's libraries and modules
    "optuna",
    "pymoo",
    "moocore",
    "ray",
    "plotly",
    "pandas",
    "scipy",
    "search.study",
    "search.run",
    "search.results",
    # dynosim's modules a trace replay without a planner, SLO stop or workload file does not use
    "dynosim.workload.spec",
    "dynosim.workload.files",
    "dynosim.workload.client",
    "dynosim.slo_monitor",
    "dynosim.validation",
    # rich's live display (no spinner on a pipe)
    "rich.live",
)

_PROBE = """
import json, sys
from search.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def test_simulate_trace_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    argv = ["simulate", str(EXAMPLE), "--trace", str(TRACE), "--json", str(tmp_path / "m.json")]
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["code"] == 0
    modules = report["modules"]
    assert "dynosim.simulation" in modules  # the probe did run a simulation
    loaded = [m for m in modules for name in NOT_IMPORTED if m == name or m.startswith(name + ".")]
    assert loaded == []
