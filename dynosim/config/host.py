"""The host section: API server, tokenizer and detokenizer processes in front of each engine."""

from __future__ import annotations

from dataclasses import dataclass

from dynosim.checks import integer, number
from dynosim.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class HostConfig:
    """The host processes in front of each engine replica: API server, tokenizer, detokenizer.

    The costs are CPU time of one host process (``dynosim.host`` has the model and sourced
    reference figures). ``request_us``: the fixed cost of one request (HTTP parse, request
    setup, the tokenizer call); ``input_token_us``: tokenisation per prompt token;
    ``output_token_us``: detokenisation and SSE streaming per output token. The process
    count per replica is ``api_server_count`` on vLLM (``--api-server-count``, default 1),
    ``tokenizer_workers`` on SGLang (``--tokenizer-worker-num``, default 1) and
    ``postprocess_workers`` on TensorRT-LLM (``trtllm-serve --num_postprocess_workers``,
    default 0: the server's own process turns the engine's responses into OpenAI chunks;
    ``N > 0``: N worker processes do, tensorrt_llm/commands/serve.py); another backend's field
    is an error. Unset: as many processes as there is work (the costs are pure delays). All
    costs 0 (the default) is the same as no host section.
    """

    api_server_count: int | None = None
    tokenizer_workers: int | None = None
    postprocess_workers: int | None = None
    request_us: float = 0.0
    input_token_us: float = 0.0
    output_token_us: float = 0.0

    def __post_init__(self) -> None:
        for name in ("api_server_count", "tokenizer_workers"):
            if getattr(self, name) is not None:
                integer(f"host.{name}", getattr(self, name), 1, 4096)
        if self.postprocess_workers is not None:
            integer("host.postprocess_workers", self.postprocess_workers, 0, 4096)
        for name in ("request_us", "input_token_us", "output_token_us"):
            number(f"host.{name}", getattr(self, name), 0, 10_000_000)

    @property
    def processes(self) -> int | None:
        """Host processes per replica (None: unbounded; TRT-LLM's 0 workers: its one server)."""
        if self.api_server_count is not None:
            return self.api_server_count
        if self.postprocess_workers is not None:
            return max(1, self.postprocess_workers)
        return self.tokenizer_workers


HOST_COUNT_BACKEND = {"api_server_count": "vllm", "tokenizer_workers": "sglang",
                      "postprocess_workers": "trtllm"}  # fmt: skip
"""The backend that has each host process-count field (vLLM ``--api-server-count``, SGLang
``--tokenizer-worker-num``, TensorRT-LLM ``--num_postprocess_workers``)."""
SERVER_DEFAULT_HOST: dict[str, dict[str, int]] = {
    "vllm": {"api_server_count": 1},
    "sglang": {"tokenizer_workers": 1},
    "trtllm": {"postprocess_workers": 0},
}
"""Each server's own default process count (the sources in :class:`HostConfig`): what a
benchmark that records none ran with."""


def check_host(backend: str, host: HostConfig | None) -> None:
    """A host section, whose process-count field is the backend's own (None: no section)."""
    if host is None:
        return
    if not isinstance(host, HostConfig):
        raise ConfigError("host", host, "a host section {api_server_count | tokenizer_workers | "
                          "postprocess_workers, request_us, input_token_us, "
                          "output_token_us}")  # fmt: skip
    for name, owner in HOST_COUNT_BACKEND.items():
        value = getattr(host, name)
        if value is not None and backend != owner:
            raise ConfigError(
                f"host.{name}", value, f"unset with backend {backend} (a {owner} option; "
                "vllm: api_server_count, sglang: tokenizer_workers, trtllm: postprocess_workers)"
            )  # fmt: skip
