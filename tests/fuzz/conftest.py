"""Prints how many fuzz cases each target ran at the end of the session."""

from __future__ import annotations

import json
import os

import pytest

from tests.fuzz._cases import CASES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not CASES:
        return
    terminalreporter.section("fuzz cases")
    for target, n in sorted(CASES.items()):
        terminalreporter.write_line(f"{target:34s} {n:6d}")
    terminalreporter.write_line(f"{'total':34s} {sum(CASES.values()):6d}")
    out = os.environ.get("DYNOSIM_FUZZ_COUNTS")  # optional: a JSON file for the closing note
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(dict(CASES), f, indent=1, sort_keys=True)
