"""A pool of identical engine workers that can grow and shrink while the simulation runs.

Workers are numbered in creation order and never renumbered. A worker is *starting* (its GPUs
are provisioned, it takes no traffic until its cold start ends), *active* (routable),
*draining* (no new requests; it finishes those it holds, then frees its GPUs) or *retired*.
Routers see the active workers only, in index order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import simpy
from simpy.events import NORMAL

from dynosim.config import EngineConfig, PoolName
from dynosim.engine.batch import FinishCallback
from dynosim.engine.decode_runs import DecodeRuns
from dynosim.engine.kv_cache import PrefixKVCache
from dynosim.engine.lockstep import LockstepGroup
from dynosim.engine.policies import VllmWorker
from dynosim.engine.state import RunningRequest
from dynosim.engine.worker import EngineWorker, TokensCallback
from dynosim.router import Router
from dynosim.timer import at

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dynosim.config import DeploymentConfig
    from dynosim.perf.deployment import DeploymentPerf


class WorkerPool:
    """Engines of one kind (aggregated, prefill or decode), their router and their GPU timeline.

    ``worker_cls`` is the backend's scheduling policy
    (:func:`dynosim.engine.policies.worker_class`). With attention DP the workers are the ranks
    of replicas (:meth:`step_together`).

    Attributes:
        workers: Every worker ever created, by index.
        active: The routable workers, in index order.
        starting: Workers provisioned and still in their cold start, by index.
        draining: Workers that take no new requests and retire once empty, by index.
        gpu_changes: ``(time_us, provisioned GPUs of the pool from then on)``, in time order.
        scaling_events: Workers added or drained by the planner.
    """

    def __init__(
        self,
        name: PoolName,
        env: simpy.Environment,
        *,
        tp: int,
        workers: int,
        engine: EngineConfig,
        perf: DeploymentPerf,
        router: Router,
        on_finish: FinishCallback,
        fast_forward: bool,
        worker_cls: type[EngineWorker] = VllmWorker,
    ) -> None:
        self.name = name
        self.env = env
        self.worker_cls = worker_cls
        self.tp = tp
        self.engine = engine
        self.perf = perf
        self.router = router
        self._on_finish = on_finish
        self._fast_forward = fast_forward
        self.workers: list[EngineWorker] = []
        self.active: list[EngineWorker] = []
        self.starting: dict[int, EngineWorker] = {}
        self.draining: dict[int, EngineWorker] = {}
        self._retired: set[int] = set()
        self.gpu_changes: list[tuple[int, int]] = [(0, 0)]
        self.scaling_events = 0
        self.on_retire: Callable[[EngineWorker, int], None] | None = None
        self.on_tokens: TokensCallback | None = None  # given to every worker (see EngineWorker)
        self._runs = DecodeRuns(perf.timing)  # the workers' decode step prices, shared
        for _ in range(workers):
            self.active.append(self._create(0))

    def step_together(self, ranks: int) -> None:
        """Make each ``ranks`` consecutive workers one attention-DP replica, stepping together.

        (:class:`~dynosim.engine.lockstep.LockstepGroup`; the pool does not grow or shrink:
        a planner is refused with attention DP.)
        """
        for i in range(0, len(self.workers), ranks):
            LockstepGroup(self.env, self.workers[i : i + ranks], self.engine)

    # ------------------------------------------------------------------ views
    @property
    def provisioned(self) -> int:
        """Workers holding GPUs now (starting, active and draining)."""
        return len(self.active) + len(self.starting) + len(self.draining)

    @property
    def serving(self) -> int:
        """Workers that count towards the pool's size: active and starting (not draining)."""
        return len(self.active) + len(self.starting)

    @property
    def gpus(self) -> int:
        """GPUs provisioned now."""
        return self.provisioned * self.tp

    def route(self, rr: RunningRequest, now_us: int) -> EngineWorker:
        """The active worker the pool's router picks for ``rr``."""
        return self.active[self.router.route(rr, self.active, now_us)]

    # ---------------------------------------------------------------- scaling
    def add(self, now_us: int, startup_us: int) -> EngineWorker:
        """Provision a worker now; it takes traffic ``startup_us`` later."""
        w = self._create(now_us)
        self.scaling_events += 1
        if startup_us <= 0:
            self._activate(w)
        else:
            self.starting[w.index] = w
            at(self.env, now_us + startup_us, NORMAL, self._on_ready, w.index)
        return w

    def remove(self, now_us: int) -> EngineWorker | None:
        """Shrink by one: cancel the newest starting worker, else drain an active one.

        The drained worker is the active one with the fewest outstanding requests (ties: the
        newest). The last active worker is never drained (None).
        """
        if self.starting:
            w = self.starting.pop(max(self.starting))
            self.scaling_events += 1
            self._retire(w, now_us)
            return w
        if len(self.active) <= 1:
            return None
        w = min(reversed(self.active), key=lambda x: x.outstanding)
        self.active.remove(w)
        self.router.workers_changed()
        self.scaling_events += 1
        self.draining[w.index] = w
        self.check_drained(w, now_us)
        return w

    def check_drained(self, w: EngineWorker, now_us: int) -> None:
        """Retire ``w`` if it is draining and holds nothing any more."""
        if w.index in self.draining and w.outstanding == 0:
            del self.draining[w.index]
            self._retire(w, now_us)

    # --------------------------------------------------------------- internals
    def _create(self, now_us: int) -> EngineWorker:
        engine = self.engine
        w = self.worker_cls(
            len(self.workers),
            self.env,
            engine=engine,
            kv=PrefixKVCache(self.perf.kv_blocks, engine.block_size),
            timing=self.perf.timing,
            on_finish=self._on_finish,
            fast_forward=self._fast_forward,
            runs=self._runs,
        )
        w.on_tokens = self.on_tokens
        self.workers.append(w)
        self._set_gpus(now_us, self.tp)
        return w

    def set_on_tokens(self, callback: TokensCallback | None) -> None:
        """Tell every worker, present and future, to report its steps' tokens to ``callback``."""
        self.on_tokens = callback
        for w in self.workers:
            w.on_tokens = callback

    def _on_ready(self, index: int) -> None:
        w = self.starting.pop(index, None)
        if w is not None:  # not cancelled meanwhile
            self._activate(w)

    def _activate(self, w: EngineWorker) -> None:
        at = len(self.active)
        while at and self.active[at - 1].index > w.index:
            at -= 1
        self.active.insert(at, w)
        self.router.workers_changed()

    def _retire(self, w: EngineWorker, now_us: int) -> None:
        self._retired.add(w.index)
        self._set_gpus(now_us, -self.tp)
        if self.on_retire is not None:
            self.on_retire(w, now_us)

    def _set_gpus(self, now_us: int, delta: int) -> None:
        t, g = self.gpu_changes[-1]
        if t == now_us:
            self.gpu_changes[-1] = (t, g + delta)
        else:
            self.gpu_changes.append((now_us, g + delta))


def pool_perfs(
    config: DeploymentConfig, perf: DeploymentPerf | Mapping[PoolName, DeploymentPerf] | None
) -> dict[PoolName, DeploymentPerf]:
    """Each pool's performance: given, or resolved from its view of the config.

    Raises:
        ConfigError, InfeasibleError: as ``resolve``; in disagg mode the field or message
            names the pool (``decode.tp``, "decode pool: ...").
    """
    from dynosim.perf.deployment import DeploymentPerf, resolve_pools

    if perf is None:
        return resolve_pools(config)
    if isinstance(perf, DeploymentPerf):
        return {name: perf for name, _ in config.pools()}
    return {name: perf[name] for name, _ in config.pools()}
