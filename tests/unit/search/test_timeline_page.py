"""The planner timeline page has an ITL panel with the SLO line (issue 20)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dynosim.config import DeploymentConfig
from dynosim.simulation import Simulation
from search.results.pages.timeline import request_itl_ms, timeline_figure
from tests.unit.search.fakes import tiny_requests


def test_request_itl_is_the_mean_gap_between_output_tokens() -> None:
    rec = SimpleNamespace(
        arrival_us=np.array([0, 1_000_000, 2_000_000, 3_000_000]),
        first_token_us=np.array([100_000, 1_200_000, 2_100_000, -1]),
        finish_us=np.array([1_100_000, 1_200_000, 2_600_000, -1]),
        output_tokens=np.array([11, 1, 6, 5]),
    )
    at, itl = request_itl_ms(rec)
    # 10 gaps in 1 s; a 1-token request has no gap; 5 gaps in 0.5 s; an unfinished one is out
    assert at.tolist() == [0.0, 2.0]
    assert itl.tolist() == pytest.approx([100.0, 100.0])


def test_figure_has_an_itl_panel_with_the_slo() -> None:
    cfg = DeploymentConfig.from_dict({"model": "meta-llama/Meta-Llama-3.1-8B", "gpu": "h200_sxm",
                                      "timing": "roofline", "slo": {"ttft_ms": 900,
                                                                    "itl_ms": 40}})  # fmt: skip
    res = Simulation(cfg, tiny_requests(30), sample_interval_s=0.5).run()
    fig = timeline_figure(res, title="t", slo=cfg.slo)
    titles = [a.text for a in fig.layout.annotations]
    assert "inter-token latency" in titles
    (per_request,) = [t for t in fig.data if t.name == "ITL (per request)"]
    _, itl = request_itl_ms(res.records)
    assert list(per_request.y) == pytest.approx(itl.tolist())
    assert itl.size == 30  # every request of 20 tokens
    assert any(t.name == "ITL p90 per interval" for t in fig.data)
    lines = {(s.y0, s.yref) for s in fig.layout.shapes}
    assert (40, "y4") in lines  # the ITL SLO on the ITL panel
    assert (900, "y3") in lines  # the TTFT SLO on the TTFT panel
    assert "ITL SLO 40 ms" in titles
