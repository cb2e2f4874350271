"""The bad-input corpus (``benchmarks/bad_inputs.py``) in the test suite: every case is clear.

Each case runs ``dynosim ...`` in a forked child with a timeout and a memory cap; a bad input must
end with exit status 2 and one ``dynosim ...`` line on stderr, a control must exit 0. The whole
corpus takes about 10-30 s (the children skip the interpreter start).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _corpus() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bad_inputs", ROOT / "benchmarks" / "bad_inputs.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bad_inputs"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(sys.platform == "win32", reason="forks the test process")
def test_every_bad_input_gives_one_clear_line() -> None:
    corpus = _corpus()
    corpus.preload()
    cases = corpus.cases()
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names must be unique"
    wrong = []
    for case in cases:
        verdict, last, _ = corpus.fork_case(case, timeout_s=20.0, memory_gb=6.0)
        if verdict not in ("clear", "ok"):
            wrong.append(f"{verdict}: {case.name}: {last[:200]}")
    assert len(cases) >= 100
    assert not wrong, "\n".join(wrong)
