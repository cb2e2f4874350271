"""``dynosim calibrate``: the fit recovers overheads the simulator itself was run with."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from dynosim.perf.calibration import HostCalibration, StepCalibration, load_profile
from dynosim.validation.calibrate import FitOptions, calibrate, design, predict
from dynosim.validation.calibrate import fit as calibrate_module
from dynosim.validation.measurement import Measurement
from dynosim.validation.validate import replay
from search.cli import main

TRUE_STEP = StepCalibration(base_us=400.0, per_request_us=12.0, per_token_us=0.5, prefill=1.3,
                            decode=0.9)  # fmt: skip
TRUE_HOST = HostCalibration(request_us=20_000.0, input_token_us=8.0)
SHAPES = [  # (tp, isl, osl, concurrency): prefill-heavy and decode-heavy, alone and batched
    (1, 512, 64, 1), (1, 2048, 64, 4), (1, 1024, 128, 16), (2, 4096, 32, 8),
    (2, 256, 128, 32), (1, 3000, 16, 2), (2, 1500, 96, 12),
]  # fmt: skip


def _row(i: int, tp: int, isl: int, osl: int, c: int) -> Measurement:
    return Measurement(where=f"synthetic:{i}", model="meta-llama/Llama-3.1-8B-Instruct",
                       gpu="h100_sxm", backend="trtllm", tp=tp, isl=isl, osl=osl, concurrency=c,
                       ttft_ms=1.0, tpot_ms=1.0)  # fmt: skip


@pytest.fixture(scope="module")
def synthetic() -> list[Measurement]:
    """Rows 'measured' by the simulator with TRUE_STEP and TRUE_HOST (2 requests per client)."""
    return _measured("closed-loop")


def _measured(client: str, step: StepCalibration = TRUE_STEP) -> list[Measurement]:
    """The rows as the simulator measures them with a client of ``client``'s kind (unrecorded)."""
    out = []
    for i, shape in enumerate(SHAPES):
        m = _row(i, *shape)
        r = replay(m, rounds=2, step=step, host=TRUE_HOST, unrecorded_client=client)
        assert r.refused is None
        out.append(dataclasses.replace(m, ttft_ms=r.ttft_ms, tpot_ms=r.tpot_ms))
    return out


def test_the_design_matrix_is_the_simulator_to_the_microsecond(
    synthetic: list[Measurement],
) -> None:
    d = design(synthetic, rounds=2)
    theta = [
        TRUE_STEP.base_us,
        TRUE_STEP.per_request_us,
        TRUE_STEP.per_token_us,
        TRUE_STEP.prefill - TRUE_STEP.decode,  # the fit's parameters: prefill >= decode
        TRUE_STEP.decode,
        TRUE_HOST.request_us,
        TRUE_HOST.input_token_us,
    ]
    ttft, tpot = predict(d, np.array(theta))
    for m, t, p in zip(synthetic, ttft, tpot, strict=True):
        assert t == pytest.approx(m.ttft_ms, rel=2e-4)
        assert p == pytest.approx(m.tpot_ms, rel=2e-4)


DECODE_ABOVE = dataclasses.replace(TRUE_STEP, prefill=0.7, decode=1.2)  # vLLM's ask (issue 19)


def test_the_other_split_is_the_simulator_to_the_microsecond() -> None:
    """With ``prefill < decode`` a mixed step costs ``prefill * K + (decode - prefill) * K_d``
    (``K_d`` the decodes' own kernel time): the design's other side is exactly that."""
    rows = _measured("closed-loop", DECODE_ABOVE)
    d = design(rows, rounds=2).other_side()
    assert d.decode_first
    theta = [DECODE_ABOVE.base_us, DECODE_ABOVE.per_request_us, DECODE_ABOVE.per_token_us,
             DECODE_ABOVE.decode - DECODE_ABOVE.prefill, DECODE_ABOVE.prefill,
             TRUE_HOST.request_us, TRUE_HOST.input_token_us]  # fmt: skip
    ttft, tpot = predict(d, np.array(theta))
    for m, t, p in zip(rows, ttft, tpot, strict=True):
        assert t == pytest.approx(m.ttft_ms, rel=2e-4)
        assert p == pytest.approx(m.tpot_ms, rel=2e-4)
    # the same factors priced with the first split's share are measurably off
    first = design(rows, rounds=2)
    t1, _ = predict(first, np.array(theta))
    assert max(abs(a / m.ttft_ms - 1) for a, m in zip(t1, rows, strict=True)) > 1e-2


def test_calibrate_fits_a_decode_factor_above_the_prefill_one() -> None:
    rows = _measured("closed-loop", DECODE_ABOVE)
    profile, fits = calibrate(rows, start=load_profile(), rounds=2,
                              opts=FitOptions(factor_prior=0.0))  # fmt: skip
    got = profile.backend("trtllm").step
    assert fits[0].design.decode_first
    for name in ("base_us", "per_request_us", "prefill", "decode"):
        assert getattr(got, name) == pytest.approx(getattr(DECODE_ABOVE, name), rel=0.02), name
    r = replay(rows[1], rounds=2, profile=profile)
    assert r.ttft_ms == pytest.approx(rows[1].ttft_ms, rel=0.01)
    assert r.tpot_ms == pytest.approx(rows[1].tpot_ms, rel=0.01)


def test_calibrate_recovers_known_overheads_within_2_percent(
    synthetic: list[Measurement],
) -> None:
    profile, fits = calibrate(synthetic, start=load_profile(), rounds=2,
                              opts=FitOptions(factor_prior=0.0))  # fmt: skip
    got = profile.backend("trtllm")
    for name in ("base_us", "per_request_us", "per_token_us", "prefill", "decode"):
        assert getattr(got.step, name) == pytest.approx(getattr(TRUE_STEP, name), rel=0.02), name
    for name in ("request_us", "input_token_us"):
        assert getattr(got.host, name) == pytest.approx(getattr(TRUE_HOST, name), rel=0.02), name
    assert got.sigma["tpot"] < 0.05  # held-out spread: each TP predicted from the other
    assert got.unrecorded_client == "closed-loop"  # the client model that made the rows
    assert not fits[0].design.decode_first  # prefill >= decode: the first split
    assert profile.fitted_on["rows"] == len(SHAPES)
    assert profile.fitted_on["groups"] == ["meta-llama/Llama-3.1-8B-Instruct/h100_sxm/trtllm"]
    # backends without rows keep the starting profile's values
    assert profile.backend("vllm") == load_profile().backend("vllm")
    # re-simulating with the fitted profile reproduces the 'measurements'
    for m in synthetic[:3]:
        r = replay(m, rounds=2, profile=profile)
        assert r.ttft_ms == pytest.approx(m.ttft_ms, rel=0.01)
        assert r.tpot_ms == pytest.approx(m.tpot_ms, rel=0.01)
    assert len(fits) == 1


def test_calibrate_tells_which_client_model_made_rows_that_record_none(tmp_path: Path) -> None:
    """Rows made by a jittered InferenceX-style client: the fit keeps that model, and recovers."""
    rows = _measured("inferencex")
    closed = design(rows, rounds=2, unrecorded_client="closed-loop")
    assert [m.client for m in closed.rows] == [None] * len(SHAPES)
    profile, _ = calibrate(rows, start=load_profile(), rounds=2,
                           opts=FitOptions(factor_prior=0.0))  # fmt: skip
    got = profile.backend("trtllm")
    assert got.unrecorded_client == "inferencex"
    assert got.step.base_us == pytest.approx(TRUE_STEP.base_us, rel=0.02)
    assert got.host.request_us == pytest.approx(TRUE_HOST.request_us, rel=0.02)
    profile.write(tmp_path / "p.yaml")
    assert load_profile(tmp_path / "p.yaml").backend("trtllm").unrecorded_client == "inferencex"


def test_calibrate_tells_the_client_model_of_each_source(tmp_path: Path) -> None:
    """Two files of rows that record no client, one made by InferenceX's client and one by the
    same client with a stream queued ahead (``queued``): each source gets its own model, the
    overheads are recovered, and ``validate`` replays each file's rows with its model."""
    jittered = [dataclasses.replace(m, source="jittered.csv") for m in _measured("inferencex")]
    queued = [dataclasses.replace(m, where=f"q{m.where}", source="queued.csv")
              for m in _measured("queued")]  # fmt: skip
    # the queued rows' TTFT holds one wait for a slot more
    assert all(q.ttft_ms > j.ttft_ms for q, j in zip(queued, jittered, strict=True))
    profile, _ = calibrate(jittered + queued, start=load_profile(), rounds=2,
                           opts=FitOptions(factor_prior=0.0))  # fmt: skip
    got = profile.backend("trtllm")
    assert got.client_for("jittered.csv") == "inferencex"
    assert got.client_for("queued.csv") == "queued"
    for name in ("base_us", "per_request_us", "prefill", "decode"):
        assert getattr(got.step, name) == pytest.approx(getattr(TRUE_STEP, name), rel=0.02), name
    assert got.host.request_us == pytest.approx(TRUE_HOST.request_us, rel=0.02)
    profile.write(tmp_path / "p.yaml")
    again = load_profile(tmp_path / "p.yaml")
    assert again.backend("trtllm").sources == got.sources
    for m in (jittered[2], queued[2]):
        r = replay(m, rounds=2, profile=again)
        assert r.ttft_ms == pytest.approx(m.ttft_ms, rel=0.01)


def test_cli_writes_a_profile_a_deployment_can_use(tmp_path: Path) -> None:
    csv = tmp_path / "m.csv"
    lines = ["model,gpu,backend,tp,isl,osl,concurrency,ttft_ms,tpot_ms"]
    for i, shape in enumerate(SHAPES[:4]):
        m = _row(i, *shape)
        r = replay(m, rounds=2, step=TRUE_STEP, host=TRUE_HOST)
        lines.append(f"{m.model},{m.gpu},{m.backend},{m.tp},{m.isl},{m.osl},{m.concurrency},"
                     f"{r.ttft_ms},{r.tpot_ms}")  # fmt: skip
    csv.write_text("\n".join(lines) + "\n")
    out = tmp_path / "profile.yaml"
    assert main(["calibrate", str(csv), "--out", str(out), "--rounds", "2", "--no-factors",
                 "--no-verify", "--unrecorded-client", "inferencex"]) == 0  # fmt: skip
    text = out.read_text()
    assert text.startswith("# dynosim calibration profile, written by:")
    assert "dynosim calibrate" in text
    p = load_profile(out)
    assert p.backend("trtllm").step.prefill == 1.0  # --no-factors
    assert p.backend("trtllm").unrecorded_client == "inferencex"  # as asked (the rows: closed loop)
    assert p.fitted_on["measurements"] == "m.csv"


def test_the_host_cost_in_the_simulated_host_equals_the_added_one_for_one_client() -> None:
    m = _row(0, 1, 2048, 32, 1)  # one client: nothing to reorder, the delay only adds
    fixed = "closed-loop"  # every prompt exactly 2048 tokens
    added = replay(m, rounds=2, step=TRUE_STEP, host=TRUE_HOST, unrecorded_client=fixed)
    in_sim = replay(m, rounds=2, step=TRUE_STEP, host=TRUE_HOST, host_in_sim=True,
                    unrecorded_client=fixed)  # fmt: skip
    alone = replay(m, rounds=2, step=TRUE_STEP, host=HostCalibration(), unrecorded_client=fixed)
    assert added.ttft_ms == pytest.approx(alone.ttft_ms + TRUE_HOST.delay_us(2048) / 1e3)
    assert in_sim.ttft_ms == pytest.approx(added.ttft_ms, abs=0.01)
    assert in_sim.tpot_ms == pytest.approx(added.tpot_ms, rel=1e-6)


def test_rows_that_record_a_client_are_replayed_once_for_both_client_models(
    synthetic: list[Measurement], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dynosim.validation.calibrate import linear as cal

    rows = synthetic[:2] + [dataclasses.replace(m, client="vllm-bench") for m in synthetic[2:4]]
    first = design(rows, rounds=2)
    fresh = design(rows, rounds=2, unrecorded_client="inferencex")
    calls = []
    real = cal.replay
    monkeypatch.setattr(cal, "replay", lambda m, **kw: calls.append(m) or real(m, **kw))
    reused = design(rows, rounds=2, unrecorded_client="inferencex", reuse=first)
    assert np.array_equal(reused.ttft, fresh.ttft)
    assert np.array_equal(reused.tpot, fresh.tpot)
    assert [m.where for m in reused.rows] == [m.where for m in fresh.rows]
    assert {m.where for m in calls} == {m.where for m in synthetic[:2]}  # only the unrecorded


def test_calibrate_finds_the_streaming_cost_that_saturates_the_server() -> None:
    """Rows whose server process streams 90 us per token: at c = 128 it saturates (TTFT grows
    far beyond the engine's). The fit finds 90 us on its grid and reproduces those rows."""
    host = dataclasses.replace(TRUE_HOST, output_token_us=90.0)
    shapes = [*SHAPES, (2, 512, 256, 128), (1, 1024, 256, 128), (2, 256, 128, 64)]
    rows = []
    for i, shape in enumerate(shapes):
        m = _row(i, *shape)
        r = replay(m, rounds=2, step=TRUE_STEP, host=host)
        rows.append(dataclasses.replace(m, ttft_ms=r.ttft_ms, tpot_ms=r.tpot_ms))
    no_stream = replay(rows[-3], rounds=2, step=TRUE_STEP, host=TRUE_HOST)
    assert rows[-3].ttft_ms > 1.5 * no_stream.ttft_ms  # the host's queue, not the engine
    profile, fits = calibrate(rows, start=load_profile(), rounds=2,
                              opts=FitOptions(factor_prior=0.0))  # fmt: skip
    got = profile.backend("trtllm")
    assert got.host.output_token_us == 90.0
    assert fits[0].output_token_us == 90.0
    for m in rows[-3:]:
        r = replay(m, rounds=2, profile=profile)
        assert r.ttft_ms == pytest.approx(m.ttft_ms, rel=0.05)
        assert r.tpot_ms == pytest.approx(m.tpot_ms, rel=0.05)
    # without the streaming fit the same rows are far off
    flat, _ = calibrate(rows, start=load_profile(), rounds=2,
                        opts=FitOptions(factor_prior=0.0, fit_streaming=False))  # fmt: skip
    assert flat.backend("trtllm").host.output_token_us == 0.0
    r = replay(rows[-3], rounds=2, profile=flat)
    assert abs(r.ttft_ms / rows[-3].ttft_ms - 1) > 0.2


def test_each_big_enough_file_gets_its_own_host_delays(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two files of the same shapes whose harnesses add different TTFT floors (20 ms and 60 ms
    per request): each file's own delays are recovered, the backend's lie within their span (the
    robust fit leans to one file's floor rather than averaging two harnesses), and a file too
    small for its own keeps the backend's."""
    monkeypatch.setattr(calibrate_module, "SOURCE_HOST_ROWS", len(SHAPES))
    slow = HostCalibration(request_us=60_000.0, input_token_us=TRUE_HOST.input_token_us)
    rows = []
    for name, host in (("fast.csv", TRUE_HOST), ("slow.csv", slow)):
        for i, shape in enumerate(SHAPES):
            m = dataclasses.replace(_row(i, *shape), where=f"{name}:{i}", source=name)
            r = replay(m, rounds=2, step=TRUE_STEP, host=host)
            rows.append(dataclasses.replace(m, ttft_ms=r.ttft_ms, tpot_ms=r.tpot_ms))
    tiny = dataclasses.replace(rows[0], where="tiny.csv:1", source="tiny.csv")
    profile, fits = calibrate([*rows, tiny], start=load_profile(), rounds=2,
                              opts=FitOptions(factor_prior=0.0, fit_streaming=False))  # fmt: skip
    got = profile.backend("trtllm")
    assert got.host_for("fast.csv").request_us == pytest.approx(20_000.0, rel=0.02)
    assert got.host_for("slow.csv").request_us == pytest.approx(60_000.0, rel=0.02)
    assert 0.9 * 20_000.0 < got.host.request_us < 60_000.0
    assert "tiny.csv" not in got.sources
    assert got.host_for("tiny.csv") == got.host
    for m in (rows[3], rows[len(SHAPES) + 3]):
        assert replay(m, rounds=2, profile=profile).ttft_ms == pytest.approx(m.ttft_ms, rel=0.01)
    # held out: a configuration's file delays come from the file's other configuration
    assert fits[0].sigma()["ttft"] < 0.05


def test_one_configuration_has_no_held_out_figures_and_odd_factors_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20: held-out errors need a configuration to leave out; factors far from 1 warn."""
    from search.cli.simulator.calibrate import factor_warnings

    monkeypatch.setenv("COLUMNS", "200")  # the table whole, whatever the terminal

    csv = tmp_path / "m.csv"
    lines = ["model,gpu,backend,tp,isl,osl,concurrency,ttft_ms,tpot_ms"]
    for i, shape in enumerate(s for s in SHAPES if s[0] == 1):  # one configuration: tp 1
        m = _row(i, *shape)
        r = replay(m, rounds=2, step=TRUE_STEP, host=TRUE_HOST)
        lines.append(f"{m.model},{m.gpu},{m.backend},{m.tp},{m.isl},{m.osl},{m.concurrency},"
                     f"{r.ttft_ms},{r.tpot_ms}")  # fmt: skip
    csv.write_text("\n".join(lines) + "\n")
    out = tmp_path / "profile.yaml"
    assert main(["calibrate", str(csv), "--out", str(out), "--rounds", "2", "--no-factors",
                 "--no-verify", "--json", str(tmp_path / "f.json")]) == 0  # fmt: skip
    printed = " ".join(capsys.readouterr().out.split())
    assert "one configuration (model, gpu, backend, tp) only: no held-out figures" in printed
    assert "n/a (1 config)" in printed
    import json

    groups = json.loads((tmp_path / "f.json").read_text())["groups"]
    assert all("held_out" not in g for g in groups.values())
    odd = dataclasses.replace(load_profile(out).backend("trtllm").step, prefill=0.24)
    profile = load_profile(out)
    backends = {**profile.backends, "trtllm": dataclasses.replace(profile.backend("trtllm"),
                                                                  step=odd)}  # fmt: skip
    warned = factor_warnings(dataclasses.replace(profile, backends=backends), ["trtllm"])
    assert len(warned) == 1
    assert "prefill kernel factor 0.24 is outside [0.5, 2]" in warned[0]
