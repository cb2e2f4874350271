"""One decoder-only transformer architecture and the sizes derived from it.

:class:`ModelSpec` holds the fields of a Hugging Face ``config.json`` that the step-time and
memory models need (layers, heads, experts, multi-head latent attention, sliding-window and
linear-attention layers); its properties derive the weight counts (total, active per token,
routed experts) and the KV-cache and linear-attention state sizes.
:mod:`dynosim.perf.model_config` parses the configs into it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """One decoder-only transformer architecture.

    Attributes:
        name: Hugging Face id.
        aic_name: The id AIConfigurator models this architecture under, or None if it lacks it.
        layers: Decoder layers.
        hidden: Hidden size.
        heads: Attention (query) heads.
        kv_heads: Key/value heads (GQA groups).
        head_dim: Dimension of one head.
        intermediate: Dense MLP intermediate size (per expert for MoE: ``moe_intermediate``).
        vocab: Vocabulary size.
        tied_embeddings: Whether the LM head shares the embedding matrix.
        experts: Routed experts per MoE layer (0 for a dense model).
        topk: Experts each token is routed to (0 for a dense model).
        moe_intermediate: Intermediate size of one expert.
        qk_norm: Whether each head has RMSNorm on q and k (Qwen3).
        fp8_block_weights: The checkpoint's FP8 weights carry a scale per 128 x 128 block
            (``quantization_config.weight_block_size``: DeepSeek-V3/R1, MiniMax-M2,
            Qwen3-235B-A22B-FP8), not one per tensor.
        qk_norm_per_layer: The q and k RMSNorms span the whole projections, all heads at once
            (MiniMax-M2's ``qk_norm_type: per_layer``), not each head: sharded by tensor
            parallelism, each token's variance is summed across the ranks.
        dense_layers: Leading layers with a dense MLP of ``intermediate`` in a MoE model
            (``first_k_dense_replace``).
        shared_intermediate: Intermediate size of the shared expert(s) of a MoE layer, summed.
        shared_gate: Whether the shared expert output has a sigmoid gate (Qwen3.5).
        kv_lora_rank: Multi-head latent attention: rank of the compressed KV (0: not MLA).
        q_lora_rank: MLA: rank of the compressed query (0: a plain query projection).
        qk_rope_head_dim: MLA: the rotary part of a query/key head (stored in the KV cache).
        qk_nope_head_dim: MLA: the non-rotary part of a query/key head.
        v_head_dim: MLA: dimension of a value head.
        indexer_heads: DeepSeek sparse attention: heads of the lightning indexer (0: none).
        indexer_head_dim: DeepSeek sparse attention: dimension of an indexer head.
        attention_bias: Whether the q/k/v/o projections have biases (gpt-oss).
        attention_sinks: Whether each head has a learned sink logit (gpt-oss).
        expert_bias: Whether the experts and the router have biases (gpt-oss).
        output_gate: Whether full attention has a sigmoid output gate (Qwen3.5: q_proj doubled).
        sliding_window: Window of the sliding-window layers (0: none).
        sliding_layers: Layers attending only the last ``sliding_window`` tokens.
        linear_layers: Linear-attention (Gated DeltaNet) layers: a fixed state, no KV per token.
        linear_key_heads: Gated DeltaNet key heads.
        linear_value_heads: Gated DeltaNet value heads.
        linear_key_dim: Gated DeltaNet key head dimension.
        linear_value_dim: Gated DeltaNet value head dimension.
        linear_conv_kernel: Gated DeltaNet causal-convolution width.
    """

    name: str
    aic_name: str | None
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    experts: int = 0
    topk: int = 0
    moe_intermediate: int = 0
    qk_norm: bool = False
    qk_norm_per_layer: bool = False
    fp8_block_weights: bool = False
    dense_layers: int = 0
    shared_intermediate: int = 0
    shared_gate: bool = False
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    indexer_heads: int = 0
    indexer_head_dim: int = 0
    attention_bias: bool = False
    attention_sinks: bool = False
    expert_bias: bool = False
    output_gate: bool = False
    sliding_window: int = 0
    sliding_layers: int = 0
    linear_layers: int = 0
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    linear_conv_kernel: int = 0

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model."""
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (DeepSeek, Kimi-K2, GLM-5)."""
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """Layers with routed experts."""
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def full_attention_layers(self) -> int:
        """Softmax-attention layers (full or sliding-window), i.e. not linear attention."""
        return self.layers - self.linear_layers

    @property
    def attn_params_per_layer(self) -> int:
        """Attention weights of one softmax-attention layer (projections, norms, biases)."""
        if self.is_mla:
            qk_head = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = self.hidden * self.q_lora_rank + self.q_lora_rank
                q += self.q_lora_rank * self.heads * qk_head
            else:
                q = self.hidden * self.heads * qk_head
            kv = self.hidden * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv += self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
            out = self.heads * self.v_head_dim * self.hidden
            idx = 0
            if self.indexer_heads:  # wq_b, wk, k_norm (weight+bias), weights_proj
                d = self.indexer_head_dim
                idx = self.q_lora_rank * self.indexer_heads * d + self.hidden * d + 2 * d
                idx += self.hidden * self.indexer_heads
            return q + kv + out + idx
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        norms = 2 * self.head_dim if self.qk_norm else 0
        q_out = 2 * q if self.output_gate else q
        params = self.hidden * (q_out + 2 * kv) + q * self.hidden + norms
        if self.attention_bias:
            params += q + 2 * kv + self.hidden
        if self.attention_sinks:
            params += self.heads
        return params

    @property
    def linear_attn_params_per_layer(self) -> int:
        """Weights of one Gated DeltaNet layer (HF ``Qwen3NextGatedDeltaNet``)."""
        if not self.linear_layers:
            return 0
        key = self.linear_key_heads * self.linear_key_dim
        value = self.linear_value_heads * self.linear_value_dim
        in_proj = self.hidden * (2 * key + 2 * value) + self.hidden * 2 * self.linear_value_heads
        conv = (2 * key + value) * self.linear_conv_kernel
        return (
            in_proj
            + conv
            + 2 * self.linear_value_heads
            + self.linear_value_dim
            + value * self.hidden
        )

    def _expert_params(self, n: int) -> int:
        bias = n * (2 * self.moe_intermediate + self.hidden) if self.expert_bias else 0
        return n * 3 * self.hidden * self.moe_intermediate + bias

    @property
    def router_params(self) -> int:
        """Router weights (and bias) of one MoE layer."""
        return self.hidden * self.experts + (self.experts if self.expert_bias else 0)

    @property
    def shared_params_per_layer(self) -> int:
        """Shared-expert weights of one MoE layer (and their gate)."""
        gate = self.hidden if self.shared_gate else 0
        return 3 * self.hidden * self.shared_intermediate + gate

    @property
    def expert_params(self) -> int:
        """Routed-expert weights of all layers (what expert parallelism shards)."""
        return self.moe_layers * self._expert_params(self.experts)

    @property
    def mlp_params_per_layer(self) -> int:
        """MLP weights of one MoE layer (all experts, shared ones, router), or a dense one."""
        if self.is_moe:
            return (
                self._expert_params(self.experts)
                + self.router_params
                + self.shared_params_per_layer
            )
        return 3 * self.hidden * self.intermediate

    @property
    def active_mlp_params_per_layer(self) -> int:
        """MLP weights one token multiplies through in one MoE (or dense) layer."""
        if self.is_moe:
            return (
                self._expert_params(self.topk) + self.router_params + self.shared_params_per_layer
            )
        return self.mlp_params_per_layer

    @property
    def embedding_params(self) -> int:
        """Input embedding plus LM head (counted once when tied)."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    def _layers_params(self, mlp_per_moe_layer: int) -> int:
        dense_mlp = 3 * self.hidden * self.intermediate
        mlp = self.dense_layers * dense_mlp + (self.layers - self.dense_layers) * mlp_per_moe_layer
        attn = self.full_attention_layers * self.attn_params_per_layer
        attn += self.linear_layers * self.linear_attn_params_per_layer
        return attn + mlp + self.layers * 2 * self.hidden

    @property
    def layer_params(self) -> int:
        """Weights of all decoder layers (projections, MLP/experts, norms)."""
        return self._layers_params(self.mlp_params_per_layer)

    @property
    def total_params(self) -> int:
        """All weights."""
        return self.layer_params + self.embedding_params + self.hidden

    @property
    def active_params(self) -> int:
        """Weights one token multiplies through (the LM head included, the embedding not)."""
        return self._layers_params(self.active_mlp_params_per_layer) + self.vocab * self.hidden

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """Elements a token adds to one full-attention layer's cache, all KV heads together.

        MLA stores the compressed latent and the rotary key once (``kv_lora_rank +
        qk_rope_head_dim``), not per head.
        """
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_heads * self.head_dim

    @property
    def linear_state_elements(self) -> int:
        """Per-request state of all linear-attention layers (conv window + recurrent state)."""
        if not self.linear_layers:
            return 0
        key = self.linear_key_heads * self.linear_key_dim
        value = self.linear_value_heads * self.linear_value_dim
        conv = (2 * key + value) * (self.linear_conv_kernel - 1)
        recurrent = self.linear_value_heads * self.linear_key_dim * self.linear_value_dim
        return self.linear_layers * (conv + recurrent)
