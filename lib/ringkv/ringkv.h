#pragma once
// Umbrella header: the whole public API of ringkv (tensors, caches, masks,
// attention, speculation, the multi-layer container, its files and the prompt
// cache; the multi-sequence caches, batched attention, the pooled prompt cache
// and sequence files).

#include "ringkv/attention.h"              // IWYU pragma: export
#include "ringkv/attention_mask.h"         // IWYU pragma: export
#include "ringkv/batch_attention.h"        // IWYU pragma: export
#include "ringkv/batch_history.h"          // IWYU pragma: export
#include "ringkv/cache.h"                  // IWYU pragma: export
#include "ringkv/cache_file.h"             // IWYU pragma: export
#include "ringkv/causal_cache.h"           // IWYU pragma: export
#include "ringkv/context.h"                // IWYU pragma: export
#include "ringkv/dtype.h"                  // IWYU pragma: export
#include "ringkv/encoder_cache.h"          // IWYU pragma: export
#include "ringkv/error.h"                  // IWYU pragma: export
#include "ringkv/format.h"                 // IWYU pragma: export
#include "ringkv/kv_cache.h"               // IWYU pragma: export
#include "ringkv/kv_history.h"             // IWYU pragma: export
#include "ringkv/layer_caches.h"           // IWYU pragma: export
#include "ringkv/prompt_cache.h"           // IWYU pragma: export
#include "ringkv/rotating_kv_cache.h"      // IWYU pragma: export
#include "ringkv/sequence_cache.h"         // IWYU pragma: export
#include "ringkv/sequence_file.h"          // IWYU pragma: export
#include "ringkv/sequence_prompt_cache.h"  // IWYU pragma: export
#include "ringkv/shape.h"                  // IWYU pragma: export
#include "ringkv/snapshot.h"               // IWYU pragma: export
#include "ringkv/snapshot_data.h"          // IWYU pragma: export
#include "ringkv/speculation.h"            // IWYU pragma: export
#include "ringkv/tensor.h"                 // IWYU pragma: export
#include "ringkv/tensor_ops.h"             // IWYU pragma: export
#include "ringkv/wrapper_cache.h"          // IWYU pragma: export
