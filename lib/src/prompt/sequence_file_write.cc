// SaveSequence: per cache the layout, the sequence's positions and the K/V of
// its snapshot, with the caller's tokens and metadata (sequence_format.h).
#include <fmt/format.h>

#include "caches_format.h"
#include "file_frame.h"
#include "file_tensors.h"
#include "json_fields.h"
#include "metadata_file_write.h"
#include "quantized_side.h"
#include "ringkv/error.h"
#include "ringkv/sequence_file.h"
#include "sequence_format.h"
#include "sequence_snapshot_access.h"

namespace ringkv {
namespace {

constexpr const char* kFn = "SaveSequence";

// Ascending positions as runs [begin, end): a sequence's are one run unless
// its window released some, so this stays small.
detail::json Runs(const std::vector<Position>& positions) {
  detail::json runs = detail::json::array();
  std::size_t i = 0;
  while (i < positions.size()) {
    std::size_t j = i + 1;
    while (j < positions.size() && positions[j] == positions[j - 1] + 1) ++j;
    runs.push_back({positions[i], positions[j - 1] + 1});
    i = j;
  }
  return runs;
}

detail::json CacheJson(const CausalCache& cache, const SequenceSnapshot& snapshot, std::size_t c,
                       detail::TensorWriter& writer) {
  const CausalCacheOptions& o = cache.Options();
  const bool quantized = IsQuantized(o.dtype);
  const DType value_dtype = o.value_dtype.value_or(o.dtype);
  for (int l = 0; l < o.layers; ++l) {
    const std::string keys = detail::SequenceTensorName(c, l, "keys");
    const std::string values = detail::SequenceTensorName(c, l, "values");
    if (!quantized) {
      writer.Add(keys, detail::SequenceKeys(snapshot, l));
      writer.Add(values, detail::SequenceValues(snapshot, l));
      continue;
    }
    // Stored rows as bits, [1, Hkv, tokens, RowBytes] U8, as the caches file holds them.
    const auto add = [&](const std::string& name, bool is_keys, DType dtype, std::int64_t dim) {
      std::vector<std::byte> rows = detail::PackedSequenceRows(snapshot, l, is_keys);
      detail::CheckScalesToWrite(rows, dtype, dim, snapshot.Tokens(), name, kFn);
      writer.AddBytes(
          name, {1, o.kv_heads, snapshot.Tokens(), static_cast<std::int64_t>(RowBytes(dtype, dim))},
          std::move(rows));
    };
    add(keys, true, o.dtype, o.key_dim);
    add(values, false, value_dtype, o.value_dim);
  }
  // A float pool names its safetensors dtype; a quantized one each side's layout.
  const detail::json dtype =
      quantized ? detail::json{{"keys", detail::QuantizedSideJson(o.dtype, o.key_dim)},
                               {"values", detail::QuantizedSideJson(value_dtype, o.value_dim)}}
                : detail::json(detail::SafetensorsDType(o.dtype));
  return {{"layers", o.layers},   {"kv_heads", o.kv_heads},
          {"key_dim", o.key_dim}, {"value_dim", o.value_dim},
          {"dtype", dtype},       {"window", o.window},
          {"chunk", o.chunk},     {"positions", Runs(snapshot.Positions())}};
}

}  // namespace

void SaveSequence(const std::string& path, std::span<const CausalCache* const> caches,
                  SequenceId seq, std::span<const int> tokens,
                  const std::map<std::string, std::string>& metadata) {
  if (caches.empty()) throw Error(fmt::format("[{}] caches is empty", kFn));
  Position next = 0;
  for (std::size_t c = 0; c < caches.size(); ++c) {
    if (caches[c] == nullptr) throw Error(fmt::format("[{}] caches[{}] is null", kFn, c));
    const std::vector<Position> positions = caches[c]->SequencePositions(seq);
    if (positions.empty()) {
      throw Error(fmt::format("[{}] seq {} holds no tokens in caches[{}]", kFn, seq, c));
    }
    if (c > 0 && positions.back() + 1 != next) {
      throw Error(fmt::format("[{}] seq {} ends at position {} in caches[{}], {} in caches[0]", kFn,
                              seq, positions.back(), c, next - 1));
    }
    next = positions.back() + 1;
  }
  detail::CheckUserMetadata(kFn, metadata);
  detail::TensorWriter writer;
  detail::json caches_json = detail::json::array();
  for (std::size_t c = 0; c < caches.size(); ++c) {
    const std::unique_ptr<SequenceSnapshot> snapshot = caches[c]->SnapshotSequence(seq);
    caches_json.push_back(CacheJson(*caches[c], *snapshot, c, writer));
  }
  detail::WriteMetadataFile(path,
                            {detail::kSequenceFormat, detail::kSequenceVersion,
                             detail::kSequenceHeaderLimit, "LoadSequence"},
                            caches_json, tokens, metadata, writer, kFn);
}

}  // namespace ringkv
