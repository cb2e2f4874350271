"""TensorRT-LLM's attention-DP balancing: context requests wait until every rank has one.

``PyExecutor._balance_adp_requests`` (``tensorrt_llm/_torch/pyexecutor/py_executor.py``), with
``attention_dp_config: {enable_balance: true, timeout_iters: T, batching_wait_iters: B}``
(LLM API defaults off, 50, 10; InferenceX's DeepSeek-R1 recipes pass 60 and 0). At every
iteration each rank's scheduler forms its batch; the ranks all-gather, per rank, the context
requests scheduled (``c``) and the generation requests (``g``; a rank with no request at all
runs a dummy generation request, ``_pad_attention_dp_dummy_request``), and each applies the
same rule to the same numbers with the same two counters, so the replica decides as one:

* every rank has a free slot (``g < max_batch_size``) and a context request: the timeout
  counter resets; if every rank also generates, contexts wait while the batching counter is
  below ``B`` (it counts up, and resets when they run); else they run;
* otherwise the contexts wait and the timeout counter counts up; at ``T``, or when some rank
  has no generation request, it resets and they run.

The timeout counter counts iterations with no context request anywhere too (the second branch
runs with nothing to hold), so it cycles with period ``T`` while the replica only decodes, and a
context arriving then waits the rest of that cycle unless every rank gets one first (the blog
of this strategy, TensorRT-LLM tech blog 10, "ADP Balance Strategy": "it waits up to
``timeout_iters`` iterations until all other ranks have context tasks").

Here the held requests are admitted (their KV taken) and compute nothing until released, as
TensorRT-LLM's batch waiting is modelled (:mod:`dynosim.engine.policies.vllm`). Inside a
fast-forwarded stretch nothing the rule reads changes (no arrival, no finish), so the counters
advance in closed form and the stretch ends at the boundary where held contexts are released.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TIMEOUT_ITERS = 50
DEFAULT_BATCHING_WAIT_ITERS = 10


@dataclass(slots=True)
class AdpBalance:
    """The replica's balancing rule and its two counters.

    Attributes:
        timeout_iters: ``T``.
        batching_wait_iters: ``B``.
        max_batch: ``max_batch_size`` (``max_num_seqs``): a rank with that many generation
            requests has no free slot.
        waiting: TensorRT-LLM's ``adp_ctx_waiting_iters_count``.
        batching: ``adp_ctx_batching_wait_iters_count``.
    """

    timeout_iters: int
    batching_wait_iters: int
    max_batch: int
    waiting: int = 0
    batching: int = 0

    def _branch(self, contexts: list[int], generation: list[int]) -> tuple[bool, bool]:
        """(every rank has a free slot and a context request, every rank generates)."""
        ready = all(c > 0 for c in contexts) and all(g < self.max_batch for g in generation)
        return ready, all(g > 0 for g in generation)

    def decide(self, contexts: list[int], generation: list[int]) -> bool:
        """One iteration: whether the scheduled context requests run (counters updated)."""
        ready, generating = self._branch(contexts, generation)
        if ready:
            self.waiting = 0
            if generating:
                if self.batching < self.batching_wait_iters:
                    self.batching += 1
                    return False
                self.batching = 0
            return True
        self.waiting += 1
        if self.waiting >= self.timeout_iters or not generating:
            self.waiting = 0
            return True
        return False

    def advance(self, contexts: list[int], generation: list[int], m: int) -> None:
        """``m`` more iterations with the same numbers, as :meth:`decide` ``m`` times would."""
        if m <= 0:
            return
        ready, generating = self._branch(contexts, generation)
        if ready:
            self.waiting = 0
            if generating:
                self.batching = (self.batching + m) % (self.batching_wait_iters + 1)
        elif generating and self.timeout_iters > 0:
            self.waiting = (self.waiting + m) % self.timeout_iters
        else:
            self.waiting = 0

    def held_for(self, contexts: list[int], generation: list[int]) -> int:
        """Iterations after a holding one until the first that releases (same numbers)."""
        ready, _ = self._branch(contexts, generation)
        if ready:  # held by the batching counter (every rank generates)
            return self.batching_wait_iters - self.batching + 1
        return self.timeout_iters - self.waiting  # held by the timeout (every rank generates)
