"""The host section of a deployment and the host model's queue arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dynosim.config import DeploymentConfig, HostConfig
from dynosim.errors import ConfigError
from dynosim.host import Host

BASE = {"model": "x", "gpu": "h200_sxm"}


def _cfg(**data: object) -> DeploymentConfig:
    return DeploymentConfig.from_dict({**BASE, **data})


def test_host_section_round_trips_and_is_left_out_when_absent() -> None:
    cfg = _cfg(host={"api_server_count": 4, "request_us": 1200.0, "input_token_us": 1.1})
    assert cfg.host == HostConfig(api_server_count=4, request_us=1200.0, input_token_us=1.1)
    assert cfg.host.processes == 4
    assert DeploymentConfig.from_dict(cfg.to_dict()) == cfg
    assert "host" not in _cfg().to_dict()
    sgl = _cfg(backend="sglang", host={"tokenizer_workers": 2})
    assert sgl.host is not None
    assert sgl.host.processes == 2
    assert _cfg(backend="trtllm", host={"output_token_us": 30.0}).host == HostConfig(
        output_token_us=30.0
    )
    assert HostConfig().processes is None
    # trtllm-serve --num_postprocess_workers: 0 is the server's own process, N > 0 N workers
    assert _cfg(backend="trtllm", host={"postprocess_workers": 0}).host.processes == 1
    assert _cfg(backend="trtllm", host={"postprocess_workers": 3}).host.processes == 3


@pytest.mark.parametrize(
    ("data", "field", "allowed"),
    [
        ({"backend": "sglang", "host": {"api_server_count": 2}}, "host.api_server_count",
         "unset with backend sglang"),
        ({"host": {"tokenizer_workers": 2}}, "host.tokenizer_workers", "unset with backend vllm"),
        ({"backend": "trtllm", "host": {"api_server_count": 1}}, "host.api_server_count",
         "unset with backend trtllm"),
        ({"host": {"postprocess_workers": 0}}, "host.postprocess_workers",
         "unset with backend vllm"),
        ({"backend": "trtllm", "host": {"postprocess_workers": -1}}, "host.postprocess_workers",
         "an integer in [0, 4,096]"),
        ({"host": {"api_server_count": 0}}, "host.api_server_count", "an integer in [1, 4,096]"),
        ({"host": {"api_server_count": 2.5}}, "host.api_server_count", "an integer"),
        ({"backend": "sglang", "host": {"tokenizer_workers": True}}, "host.tokenizer_workers",
         "an integer"),
        ({"host": {"request_us": -1}}, "host.request_us", "[0, 10,000,000]"),
        ({"host": {"input_token_us": math.nan}}, "host.input_token_us", "a finite number"),
        ({"host": {"output_token_us": math.inf}}, "host.output_token_us", "a finite number"),
        ({"host": {"output_token_us": "fast"}}, "host.output_token_us", "a finite number"),
        ({"host": {"processes": 2}}, "host.processes", "one of api_server_count"),
        ({"host": 3}, "host", "a mapping of api_server_count"),
    ],
)  # fmt: skip
def test_bad_host_fields_are_one_line_errors(
    data: dict[str, object], field: str, allowed: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _cfg(**data)
    assert info.value.field == field
    assert allowed in info.value.allowed
    assert "\n" not in str(info.value)


def test_tokenisation_is_a_fifo_over_the_replicas_processes() -> None:
    host = Host(HostConfig(api_server_count=1, request_us=100.0, input_token_us=1.0), 4)
    # two replicas: two processes; the third request waits for the first free one
    assert host.tokenized_us(0, 0, 100, replicas=2) == 200
    assert host.tokenized_us(1, 0, 300, replicas=2) == 400
    assert host.tokenized_us(2, 50, 100, replicas=2) == 400
    assert host.tokenize_wait_us.tolist()[:3] == [0, 0, 150]
    # a replica added by the planner brings its process, free from now
    assert host.tokenized_us(3, 60, 100, replicas=3) == 260
    assert host.tokenize_busy_us == 200 + 400 + 200 + 200


def test_unbounded_tokenisation_is_a_pure_delay() -> None:
    host = Host(HostConfig(request_us=100.0, input_token_us=0.5), 3)
    assert [host.tokenized_us(i, 10, 1000, replicas=1) for i in range(3)] == [610] * 3
    assert not host.tokenize_wait_us.any()


class _Worker:
    def __init__(self, index: int) -> None:
        self.index = index


def test_streaming_backlog_grows_only_beyond_the_processes_capacity() -> None:
    host = Host(HostConfig(api_server_count=1, output_token_us=10.0), 5)
    w = _Worker(0)
    # alone: its first token (10 us of work) reaches the client 10 us after the engine made it
    host.on_tokens(w, [1_000], 0, 1)
    assert host.first_token(0, 0, 1_000) == 1_010
    # 100 more tokens, one every 100 us: 10 us of work each, the process keeps up
    host.on_tokens(w, list(range(1_100, 11_001, 100)), 1, 0)
    assert host.deliver(0, 0, 1_000, 11_000, 101) == (1_010, 11_010)
    assert host.stream_delay_us[0] == 0
    # three first tokens in one step: the step's 30 us of work, delivered together
    host.on_tokens(w, [12_000], 0, 3)
    assert [host.first_token(rid, 0, 12_000) for rid in (1, 2, 3)] == [12_030] * 3
    # beyond capacity: 200 tokens (2000 us of work) every 100 us; the backlog grows 1900 a step
    host2 = Host(HostConfig(api_server_count=1, output_token_us=10.0), 3)
    host2.on_tokens(w, [0], 0, 1)
    host2.first_token(0, 0, 0)
    host2.on_tokens(w, list(range(100, 1_001, 100)), 200, 0)
    assert host2.deliver(0, 0, 0, 1_000, 11) == (10, 1_000 + 2_000 + 9 * 1_900)


def test_a_fast_forwarded_run_of_steps_equals_its_steps_one_by_one() -> None:
    import random

    rng = random.Random(3)
    for _ in range(200):
        cfg = HostConfig(api_server_count=rng.choice([1, 2, 3]), output_token_us=rng.choice(
            [0.5, 10.0, 70.0, 333.3]))  # fmt: skip
        one, many = Host(cfg, 1), Host(cfg, 1)
        w = _Worker(0)
        t = rng.randrange(0, 1000)
        for h in (one, many):
            h.on_tokens(w, [t], 0, rng.randrange(0, 4) if h is one else 0)
        many._streams[0].work = one._streams[0].work
        ends = []
        for _ in range(rng.randrange(2, 40)):
            t += rng.choice([1, 50, 5_000, 20_000])
            ends.append(t)
        n, last = rng.randrange(0, 300), rng.randrange(0, 3)
        for j, e in enumerate(ends):
            one.on_tokens(w, [e], n, last if j == len(ends) - 1 else 0)
        many.on_tokens(w, ends, n, last)
        assert (many._streams[0].work, many._streams[0].t) == (
            one._streams[0].work, one._streams[0].t)  # fmt: skip


def test_another_replica_has_its_own_processes() -> None:
    host = Host(HostConfig(api_server_count=1, output_token_us=100.0), 3)
    host.on_tokens(_Worker(0), [0], 0, 2)
    assert host.first_token(0, 0, 0) == host.first_token(1, 0, 0) == 200
    host.on_tokens(_Worker(1), [0], 0, 1)
    assert host.first_token(2, 1, 0) == 100  # replica 1: nothing queued
    host.on_tokens(_Worker(0), [5], 0, 0)
    assert host.deliver(1, 0, 0, 5, 1) == (200, 200)  # 195 us of replica 0's queue left


def test_unbounded_streaming_is_a_pure_delay() -> None:
    host = Host(HostConfig(output_token_us=25.0), 2)
    assert host.first_token(0, 0, 1_000) == 1_025
    assert host.first_token(1, 0, 1_000) == 1_025
    assert host.deliver(0, 0, 1_000, 5_000, 10**6) == (1_025, 5_025)
    assert host.deliver(1, 0, 1_000, 5_000, 10**6) == (1_025, 5_025)


def test_dp_ranks_share_their_replicas_processes() -> None:
    cfg = HostConfig(api_server_count=2, output_token_us=10.0, request_us=100.0)
    host = Host(cfg, 3, entry_dp=2, decode_dp=2)
    # 4 DP ranks = 2 replicas = 4 tokenising processes
    assert [host.tokenized_us(i, 0, 1, replicas=4) for i in range(3)] == [100, 100, 100]
    # each rank has one of its replica's two processes: 1000 tokens at once take 10 ms
    host.on_tokens(_Worker(0), [0], 0, 1_000)
    assert host.first_token(0, 0, 0) == 10_000
    assert host.deliver(0, 0, 0, 0, 1_000) == (10_000, 10_000)
    m = host.metrics(np.arange(1), entry_us=20_000.0, decode_us=20_000.0)
    assert m.processes == 2
    assert m.tokenize_utilization == pytest.approx(300 / 20_000)  # 1 replica x 2 processes
    assert m.stream_utilization == pytest.approx(10_000 / 20_000)
    assert m.stream_delay.max == pytest.approx(10.0 - 0.01)  # 10 ms after the engine, less 10 us


def test_a_saturating_tokenizer_adds_the_queueing_of_an_md1_queue() -> None:
    """One process of fixed service time s under Poisson arrivals is an M/D/1 queue.

    Each request waits exactly as the Lindley recursion W_k = max(0, W_{k-1} + s - gap_k)
    says, and the mean wait tends to Pollaczek-Khinchine's rho s / (2 (1 - rho)): at
    s = 200 us and rho = 0.5 that is 100 us.
    """
    s, rho, n = 200, 0.5, 100_000
    gaps = np.random.default_rng(5).exponential(s / rho, n)
    arrivals = np.floor(np.cumsum(gaps)).astype(np.int64)
    host = Host(HostConfig(api_server_count=1, request_us=float(s)), n)
    for i, a in enumerate(arrivals.tolist()):
        host.tokenized_us(i, a, 1000, replicas=1)
    want = np.zeros(n, dtype=np.int64)
    for k in range(1, n):
        want[k] = max(0, want[k - 1] + s - (arrivals[k] - arrivals[k - 1]))
    assert host.tokenize_wait_us.tolist() == want.tolist()
    assert host.tokenize_wait_us.mean() == pytest.approx(rho * s / (2 * (1 - rho)), rel=0.05)
