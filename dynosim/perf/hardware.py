"""The hardware a KV transfer crosses: NVLink inside a node, RDMA between nodes, node size.

``dynosim.perf.deployment.kv_link`` takes these as the defaults of a deployment's
``kv_transfer`` section (:class:`dynosim.config.KVTransferConfig`).
"""

NVLINK_LATENCY_US = 10.0
"""Assumed per-transfer latency on NVLink inside a node (NIXL/UCX setup and completion
notice; an estimate, not a measurement: the wire latency itself is ~1 us)."""
RDMA_GBPS = 400.0
"""InfiniBand NDR / RoCE per GPU: one 400 Gb/s ConnectX-7 NIC per GPU on DGX/HGX H100,
H200 and B200 nodes (NVIDIA DGX H100/H200 user guide, "network ports")."""
RDMA_LATENCY_US = 50.0
"""Assumed per-transfer latency across nodes over RDMA (NIXL/UCX rendezvous, completion
notice and the extra hop through the NIC; an estimate)."""
GPUS_PER_NODE = 8
"""GPUs in one HGX/DGX node (AIConfigurator's ``systems/*.yaml``: ``num_gpus_per_node: 8``)."""
