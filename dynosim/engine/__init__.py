"""One engine worker: continuous-batching scheduler, paged KV cache with prefix caching, timer."""
