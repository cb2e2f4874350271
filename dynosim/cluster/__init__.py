"""The cluster: worker pools, the KV-transfer link between them, and the planner that sizes them.

Aggregated serving is one pool (``agg``); disaggregated serving a ``prefill`` and a ``decode``
pool joined by a :class:`~dynosim.cluster.transfer.KVLinks`. :mod:`dynosim.cluster.build` builds
the pools and their observation tick; ``dynosim.simulation`` wires them to the requests.
"""
