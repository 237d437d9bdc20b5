// SaveSequence: per cache the layout, the sequence's positions and the K/V of
// its snapshot, with the caller's tokens and metadata (sequence_format.h).
#include <fmt/format.h>

#include "caches_format.h"
#include "file_frame.h"
#include "file_tensors.h"
#include "json_fields.h"
#include "metadata_file_write.h"
#include "ringkv/error.h"
#include "ringkv/format.h"
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
  for (int l = 0; l < o.layers; ++l) {
    writer.Add(detail::SequenceTensorName(c, l, "keys"), detail::SequenceKeys(snapshot, l));
    writer.Add(detail::SequenceTensorName(c, l, "values"), detail::SequenceValues(snapshot, l));
  }
  return {{"layers", o.layers},
          {"kv_heads", o.kv_heads},
          {"key_dim", o.key_dim},
          {"value_dim", o.value_dim},
          {"dtype", detail::SafetensorsDType(o.dtype)},
          {"window", o.window},
          {"chunk", o.chunk},
          {"positions", Runs(snapshot.Positions())}};
}

}  // namespace

void SaveSequence(const std::string& path, std::span<const CausalCache* const> caches,
                  SequenceId seq, std::span<const int> tokens,
                  const std::map<std::string, std::string>& metadata) {
  if (caches.empty()) throw Error(fmt::format("[{}] caches is empty", kFn));
  Position next = 0;
  for (std::size_t c = 0; c < caches.size(); ++c) {
    if (caches[c] == nullptr) throw Error(fmt::format("[{}] caches[{}] is null", kFn, c));
    const CausalCacheOptions& o = caches[c]->Options();
    if (IsQuantized(o.dtype)) {
      // The format names one float element type per cache; quantized rows would
      // need the per-side layout the caches file has (docs/multi_sequence.md).
      throw Error(fmt::format(
          "[{}] caches[{}] stores keys as {} and values as {}: sequence files hold f32, f16 and "
          "bf16 pools only; nothing was written",
          kFn, c, o.dtype, o.value_dtype.value_or(o.dtype)));
    }
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
