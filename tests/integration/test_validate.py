"""``dynosim validate``: measurement readers, replay, per-group errors."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from dynosim.errors import WorkloadError
from dynosim.perf.calibration import HostCalibration, load_profile
from dynosim.validation.measurement import Measurement
from dynosim.validation.measurements import read_measurements
from dynosim.validation.validate import replay, validate
from search.cli import main

HEADER = "model,gpu,backend,tp,isl,osl,concurrency,ttft_ms,tpot_ms"


def _plain(tmp_path: Path, *rows: str, extra: str = "") -> Path:
    f = tmp_path / "m.csv"
    f.write_text("\n".join([HEADER + extra, *rows]) + "\n")
    return f


def test_a_bad_row_names_the_file_line_and_field(tmp_path: Path) -> None:
    f = _plain(tmp_path, "Qwen/Qwen3-8B,h200_sxm,vllm,1,1000,100,8,50,10",
               "Qwen/Qwen3-8B,h200_sxm,vllm,1,lots,100,8,50,10")  # fmt: skip
    with pytest.raises(WorkloadError, match=r"m\.csv:3: isl: got 'lots'"):
        read_measurements(f)
    g = _plain(tmp_path, "Qwen/Qwen3-8B,h200_sxm,vllm,1,1000,100,8,50,10,genai", extra=",client")
    with pytest.raises(WorkloadError, match=r"m\.csv:2: client: got 'genai'"):
        read_measurements(g)
    h = tmp_path / "x.csv"
    h.write_text("a,b\n1,2\n")
    with pytest.raises(WorkloadError, match=r"x\.csv:1: unknown measurement format"):
        read_measurements(h)


def test_silicon_rows_infer_the_client_and_refuse_what_is_not_modelled(tmp_path: Path) -> None:
    head = ("id,silicon_data_source,backend,model_path,system,precision,mode,isl,osl,"
            "gemm_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,silicon_ttft_ms,"
            "silicon_tpot_ms")  # fmt: skip
    f = tmp_path / "s.csv"
    f.write_text("\n".join([
        head,
        "a,db-dump/2026-04-27,vllm,Qwen/Qwen3-8B,h200_sxm,,agg,1000,100,,8,1,1,1,50,10",
        "b,internal/path,vllm,Qwen/Qwen3-8B,h200_sxm,,agg,1000,100,,8,1,1,1,50,10",
        "c,internal/path,vllm,Qwen/Qwen3-8B,h200_sxm,,disagg,1000,100,,8,1,1,1,50,10",
        "d,internal/path,vllm,Qwen/Qwen3-8B,h200_sxm,,agg,1000,100,,8,1,1,4,50,10",
        "e,internal/path,vllm,Qwen/Qwen3-8B,h200_sxm,,agg,1000,100,,8,1,2,1,50,10",
        "f,source_file=2026-04-06.csv; model=Qwen3-8B,vllm,Qwen/Qwen3-8B,h200_sxm,,agg,1000,100,"
        ",8,1,1,1,50,10",
        "g,source_file=/Users/someone/data/h200_sxm/vllm/x.csv,vllm,Qwen/Qwen3-8B,h200_sxm,,agg,"
        "1000,100,,8,1,1,1,50,10",
    ]) + "\n")  # fmt: skip
    rows = read_measurements(f)
    # InferenceX's files are named by date; a path on someone's machine records no client
    assert [r.client for r in rows] == ["inferencex", None, None, None, None, "inferencex", None]
    assert [r.refused is None for r in rows] == [True, True, False, True, False, True, True]
    assert "mode disagg: prefill_num_workers" in (rows[2].refused or "")  # the row lacks it
    # attention DP: batch_size is per DP rank, the clients are those of all four ranks
    assert (rows[3].attention_dp, rows[3].concurrency) == (4, 32)
    assert "pp_size" in (rows[4].refused or "")
    # the source file a profile can name a client model for
    assert rows[6].source == "/Users/someone/data/h200_sxm/vllm/x.csv"
    assert rows[5].source == "2026-04-06.csv"


def test_replay_reports_errors_per_group(tmp_path: Path) -> None:
    # two groups; an unknown model is refused with the catalog's one-line reason
    f = _plain(tmp_path,
               "Qwen/Qwen3-8B,h200_sxm,vllm,1,1000,64,4,50,10",
               "Qwen/Qwen3-8B,h200_sxm,vllm,1,1000,64,8,60,12",
               "Qwen/Qwen3-8B,h100_sxm,vllm,1,1000,64,4,50,10",
               "no/such-model,h200_sxm,vllm,1,1000,64,4,50,10")  # fmt: skip
    groups = validate(read_measurements(f), timing="roofline")
    s = {g.key[:2]: g.summary() for g in groups}
    h200 = s[("Qwen/Qwen3-8B", "h200_sxm")]
    assert (h200["rows"], h200["replayed"], h200["refused"]) == (2, 2, 0)
    run = list(groups[0].rows)
    expected = 100 * sum(abs(r.error("tpot")) for r in run) / 2
    assert h200["tpot_mape"] == pytest.approx(expected)
    assert all(math.isfinite(r.ttft_ms) and r.ttft_ms > 0 for r in run)
    bad = s[("no/such-model", "h200_sxm")]
    assert (bad["replayed"], bad["refused"]) == (0, 1)
    assert "model" in bad["refused_reasons"][0]


def test_cli_writes_the_groups_json(tmp_path: Path) -> None:
    f = _plain(tmp_path, "Qwen/Qwen3-8B,h200_sxm,vllm,1,1000,64,4,50,10")
    out = tmp_path / "v.json"
    html = tmp_path / "v.html"
    argv = ["validate", str(f), "--timing", "roofline", "--json", str(out), "--html", str(html)]
    assert main(argv) == 0
    page = html.read_text()
    assert "plotly" in page
    assert "m.csv:2" in page  # the hover names the row
    data = json.loads(out.read_text())
    g = data["groups"][0]
    for key in ("model", "system", "backend", "rows", "tpot_mape", "ttft_mape", "tpot_bias",
                "ttft_bias"):  # fmt: skip
        assert key in g
    assert data["rows"][0]["where"].endswith("m.csv:2")


def test_inferencex_rows_take_their_recipe_flags() -> None:
    from dynosim.validation.measurement import Measurement
    from dynosim.validation.validate import row_config

    base: dict[str, Any] = {
        "where": "x:2", "model": "Qwen/Qwen3-8B", "gpu": "h200_sxm", "tp": 1, "isl": 8192,
        "osl": 100, "concurrency": 64, "ttft_ms": 1.0, "tpot_ms": 1.0, "client": "inferencex",
    }  # fmt: skip
    trt = row_config(Measurement(backend="trtllm", **base))
    assert trt.engine.max_num_batched_tokens == 8320  # round_up_64(64 + 8192 + 64)
    vll = row_config(Measurement(backend="vllm", **base))
    assert (vll.engine.max_num_batched_tokens, vll.engine.block_size) == (16384, 32)
    plain = row_config(Measurement(backend="vllm", **{**base, "client": None}))
    assert plain.engine.max_num_batched_tokens == 8192


def test_a_group_that_names_no_row_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped --group beside a good one must not be dropped silently (a fit on fewer groups)."""
    f = _plain(tmp_path, "Qwen/Qwen3-8B,h200_sxm,vllm,1,1000,64,4,50,10")
    for cmd in ("validate", "calibrate"):
        argv = [cmd, str(f), "--group", "Qwen/Qwen3-8B/h200_sxm/vllm", "--group",
                "Qwen/Qwen3-8B/h200_vllm"]  # fmt: skip
        if cmd == "calibrate":
            argv += ["--out", str(tmp_path / "p.yaml")]
        assert main(argv) != 0
        err = capsys.readouterr().err
        assert "--group: got 'Qwen/Qwen3-8B/h200_vllm', which names no row of" in err
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.yaml").exists()


def test_rows_without_a_client_can_be_replayed_as_either_client_model(tmp_path: Path) -> None:
    """--unrecorded-client: a fixed-length closed loop, or InferenceX's jittered client."""
    f = _plain(tmp_path, "Qwen/Qwen3-8B,h200_sxm,vllm,1,2000,64,16,50,10")
    figures = {}
    for client in ("closed-loop", "inferencex"):
        out = tmp_path / f"{client}.json"
        argv = ["validate", str(f), "--timing", "roofline", "--json", str(out),
                "--unrecorded-client", client]  # fmt: skip
        assert main(argv) == 0
        row = json.loads(out.read_text())["rows"][0]
        assert row["client"] == (None if client == "closed-loop" else "inferencex")
        figures[client] = row["simulated_ttft_ms"]
    # all 16 prompts of 2000 tokens at once (every round) against jittered, spread arrivals
    assert figures["closed-loop"] > figures["inferencex"]
    rows = read_measurements(f)
    # without --unrecorded-client: the client the shipped profile fitted for vLLM's rows
    fitted = load_profile().backend("vllm").unrecorded_client
    assert validate(rows, timing="roofline")[0].rows[0].m.client == (
        None if fitted == "closed-loop" else fitted
    )


def test_a_queued_harness_adds_a_wait_for_a_slot_to_ttft_and_nothing_to_tpot() -> None:
    """``queued``: InferenceX's client with c + 1 streams against ``max_num_seqs = c``. Every
    request waits for a slot, about one inter-completion time: a request's latency over c."""
    for c in (4, 8):
        m = Measurement(where="x:1", model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100_sxm",
                        backend="trtllm", tp=1, isl=256, osl=128, concurrency=c, ttft_ms=1.0,
                        tpot_ms=1.0)  # fmt: skip
        plain = replay(m, rounds=8, unrecorded_client="inferencex", host=HostCalibration())
        queued = replay(m, rounds=8, unrecorded_client="queued", host=HostCalibration())
        latency = plain.ttft_ms + (m.osl - 1) * plain.tpot_ms
        assert 0.5 * latency / c < queued.ttft_ms - plain.ttft_ms < 1.1 * latency / c
        assert queued.tpot_ms == pytest.approx(plain.tpot_ms, rel=0.03)  # c decode at a time


def test_a_disaggregated_row_replays_on_its_two_pools_and_is_not_fitted(tmp_path: Path) -> None:
    """A silicon row of mode disagg: its prefill and decode pools as the row states them, the
    clients those of every decode rank; a row with no worker counts is refused with the field;
    calibrate leaves disaggregated rows out of the linear fit."""
    from dynosim.validation.calibrate import design
    from dynosim.validation.validate import row_config

    head = ("id,silicon_data_source,backend,model_path,system,precision,mode,isl,osl,"
            "gemm_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,prefill_batch_size,"
            "prefill_num_workers,prefill_tp_size,prefill_pp_size,decode_batch_size,"
            "decode_num_workers,decode_tp_size,decode_pp_size,silicon_ttft_ms,"
            "silicon_tpot_ms")  # fmt: skip
    f = tmp_path / "d.csv"
    f.write_text("\n".join([
        head,
        "a,db-dump/2026-04-27,vllm,Qwen/Qwen3-8B,h200_sxm,,disagg,1000,100,,,,,,1,1,1,1,4,2,1,1,"
        "50,10",
        "b,db-dump/2026-04-27,vllm,Qwen/Qwen3-8B,h200_sxm,,disagg,1000,100,,,,,,1,,1,1,,,1,1,50,10",
        "c,db-dump/2026-04-27,vllm,Qwen/Qwen3-8B,h200_sxm,,agg,1000,100,,8,1,1,1,,,,,,,,,50,10",
        "d,db-dump/2026-04-27,vllm,Qwen/Qwen3-8B,h200_sxm,,disagg,1000,100,,,,,,1,1,1,1,4,x,1,1,"
        "50,10",
    ]) + "\n")  # fmt: skip
    dis, unknown, agg, bad = read_measurements(f)
    assert "decode_num_workers: got 'x'" in (bad.refused or "")
    assert dis.refused is None
    assert dis.concurrency == 8  # 4 per decode engine x 2 engines
    assert "prefill_num_workers" in (unknown.refused or "")
    config = row_config(dis)
    assert config.mode == "disagg"
    pools = dict(config.pools())
    assert (pools["prefill"].workers, pools["decode"].workers) == (1, 2)
    assert pools["decode"].engine.max_num_seqs == 4
    assert pools["decode"].engine.enable_prefix_caching is False
    d, a = replay(dis), replay(agg)
    assert (d.refused, a.refused) == (None, None)
    # the same 8 clients: decode engines of 4 each, no prefill in their steps, decode faster
    # than one engine batching all 8 and their prompts; TTFT pays the KV transfer
    assert 0 < d.tpot_ms < a.tpot_ms
    assert 0 < d.ttft_ms < math.inf
    fit = design([dis, agg], rounds=2)
    assert [m.mode for m in fit.rows] == ["agg"]
    assert fit.refused == [(dis, "disaggregated rows are validated, not fitted")]


def test_the_validation_page_names_every_series_in_its_legend(tmp_path: Path) -> None:
    from search.results.pages.validation import validation_figure

    f = _plain(tmp_path,
               "Qwen/Qwen3-8B,h200_sxm,vllm,1,1000,64,4,50,10",
               "Qwen/Qwen3-8B,h100_sxm,vllm,1,1000,64,4,50,10")  # fmt: skip
    fig = validation_figure(validate(read_measurements(f), timing="roofline"), title="t")
    assert all(trace.name for trace in fig.data)  # every series has a name
    shown = sorted(trace.name for trace in fig.data if trace.showlegend is not False)
    assert shown == sorted({trace.name for trace in fig.data})  # and each is in the legend once
    assert {"simulated = measured", "±20%"} <= set(shown)
