"""An AIConfigurator query without data names the op, the shape and what is missing (issue 20)."""

from __future__ import annotations

from typing import Any

import pytest

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError
from dynosim.perf.aic.key import AicKey
from dynosim.perf.aic.named import NamedOps, spec_op_names

KEY = AicKey(aic_model="m", gpu="h100_sxm", backend="sglang", backend_version="0.5.14", tp=4,
             dtype="fp8", kv_dtype="fp8")  # fmt: skip
OPS = ["context_embedding", "context_qkv_gemm", "context_attention", "context_ffn2_gemm"]


class FakeHandle:
    """Op ``2`` has data only below batch 32; op ``3`` has none at all."""

    spec_bytes = b'\x0f\x00{"model_name":"m"}\x04\x00' + b"\x00\x01".join(n.encode() for n in OPS)

    def evaluate_context_ops(self, idx: list[int], **kw: Any) -> list[Any]:
        out = []
        for i in idx:
            if i >= len(OPS):
                raise IndexError("op index out of range")
            if i == 3 or (i == 2 and kw["batch_size"] >= 32):
                raise RuntimeError("No empirical utilisation data to estimate this op at "
                                   f"query=[{kw['batch_size']}.0, {kw['s']}.0, 1.0]")  # fmt: skip
            out.append((OPS[i], 0.1, 0.0, "silicon"))
        return out


def test_the_op_that_lacks_data_is_named_with_its_shape_and_the_deployment() -> None:
    h = NamedOps(FakeHandle(), KEY)
    assert [o[0] for o in h.evaluate_context_ops([0, 1, 2], batch_size=1, s=16)] == OPS[:3]
    with pytest.raises(RuntimeError) as err:
        h.evaluate_context_ops([0, 1, 2], batch_size=32, s=16)
    msg = str(err.value)
    assert msg.startswith("op context_attention at batch 32, tokens 16: ")  # named by a probe
    assert "sglang 0.5.14 on h100_sxm, fp8 weights, fp8 KV cache, tp 4" in msg
    assert "query=[32.0, 16.0, 1.0]" in msg  # AIConfigurator's own words are kept


def test_an_op_without_any_data_is_named_from_the_compiled_spec() -> None:
    assert spec_op_names(FakeHandle(), "context") == OPS
    with pytest.raises(RuntimeError, match=r"^op context_ffn2_gemm at batch 1, tokens 16"):
        NamedOps(FakeHandle(), KEY).evaluate_context_ops([0, 3], batch_size=1, s=16)
    with pytest.raises(IndexError, match="out of range"):  # the end of the op list stays as is
        NamedOps(FakeHandle(), KEY).evaluate_context_ops([9], batch_size=1, s=16)


def test_sglang_fp8_llama70b_on_h100_names_the_attention_op() -> None:
    """The issue's case, on AIConfigurator's real database (it lacks FP8-KV attention there)."""
    from dynosim.perf.aic.cache import load_tables
    from dynosim.perf.aic.key import resolve_key

    cfg = DeploymentConfig.from_dict({"model": "meta-llama/Meta-Llama-3.1-70B", "gpu": "h100_sxm",
                                      "backend": "sglang", "dtype": "fp8", "tp": 4})  # fmt: skip
    with pytest.raises(ConfigError) as err:  # AIConfigurator 2026 has no such data
        load_tables(resolve_key(cfg))
    assert "op context_attention at batch" in str(err.value)
    assert "fp8 KV cache" in str(err.value)
