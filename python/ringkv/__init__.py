"""ringkv: KV caches and attention for numpy decode loops.

Arrays are numpy arrays [1, H, L, D] (B = 1) of float32 or float16; bfloat16 is
passed as its raw bits in a uint16 array (numpy has no bfloat16). Inputs are
read in place (no copy); results are arrays over ringkv's memory (README.md,
"Python"). Caches may store K/V quantized (dtype="int8" / "int4" / "int4h", or key_dtype /
value_dtype): they take float inputs and return float32 dequantised copies
(docs/python.md, "Quantized K/V").
"""

from ringkv._ringkv import (  # noqa: F401
    AttentionCache,
    Context,
    Error,
    History,
    KVCache,
    LayerCaches,
    LayerSnapshot,
    RotatingKVCache,
    ShapeError,
    Snapshot,
    SnapshotError,
    Speculation,
    attention,
    available_isas,
    scaled_dot_product_attention,
    speculate,
)

# The prompt cache (python/src/prompt_cache.cc) and mlx-lm's helpers (prompt_cache.py).
from ringkv._ringkv import PrefixMatch, PromptCache, PromptCacheStats, PromptNode  # noqa: F401,E402
from ringkv.prompt_cache import (  # noqa: F401,E402
    can_trim_prompt_cache,
    load_prompt_cache,
    make_prompt_cache,
    save_prompt_cache,
    trim_prompt_cache,
)
