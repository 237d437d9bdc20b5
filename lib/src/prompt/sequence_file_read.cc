// LoadSequence: the whole file is checked from its header against the pool's
// layout before any tensor is read; then every tensor is read (checked against
// its checksum), and only then is the pool touched: the destination sequence
// is stored by ordinary forward passes (StartForward + Update per layer), or for
// a quantized pool restored from a snapshot of the file's stored rows (bits,
// not requantized), on saved states, so a pool that cannot hold it is rolled
// back whole.
#include <fmt/format.h>

#include <climits>

#include "caches_format.h"
#include "file_frame.h"
#include "file_source.h"
#include "file_tensors.h"
#include "json_fields.h"
#include "quantized_side.h"
#include "ringkv/error.h"
#include "ringkv/format.h"
#include "ringkv/sequence_file.h"
#include "sequence_format.h"
#include "sequence_snapshot_access.h"

namespace ringkv {
namespace {

using detail::Bad;
using detail::json;

constexpr const char* kFn = "LoadSequence";

struct CachePlan {
  std::vector<Position> positions;
  std::vector<const detail::TensorTable::value_type*> keys;  // per layer
  std::vector<const detail::TensorTable::value_type*> values;
};

struct CacheData {
  std::vector<Position> positions;
  std::vector<Tensor> keys;  // per layer, [1, Hkv, n, D]; a float pool's
  std::vector<Tensor> values;
  // A quantized pool's: per layer, its stored rows [Hkv, n, RowBytes], as bits.
  std::vector<std::vector<std::byte>> key_rows;
  std::vector<std::vector<std::byte>> value_rows;
};

void Expect(std::int64_t stated, std::int64_t pool, const char* field, const std::string& where) {
  if (stated != pool) Bad("{}.{} is {} in the file, {} in the pool", where, field, stated, pool);
}

std::vector<Position> ParseRuns(const json& runs, const std::string& where,
                                std::uint64_t data_size) {
  if (!runs.is_array() || runs.empty()) {
    Bad("{} is {}, not a non-empty array of runs", where, detail::Describe(runs));
  }
  std::vector<Position> positions;
  std::int64_t previous_end = -1;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const json& run = runs[i];
    const bool ok = run.is_array() && run.size() == 2 && run[0].is_number_integer() &&
                    run[1].is_number_integer() && run[0].get<std::int64_t>() >= 0 &&
                    run[0].get<std::int64_t>() < run[1].get<std::int64_t>() &&
                    run[1].get<std::int64_t>() <= INT_MAX &&
                    run[0].get<std::int64_t>() > previous_end;
    if (!ok) {
      Bad("{}[{}] is {}, not a run [begin, end) with {} <= begin < end <= {}", where, i,
          detail::Describe(run), previous_end + 1, INT_MAX);
    }
    const auto begin = run[0].get<Position>();
    const auto end = run[1].get<Position>();
    // Each position needs a K/V row of at least one byte in the data section.
    if (positions.size() + static_cast<std::size_t>(end - begin) > data_size) {
      Bad("{} holds more positions than the {} bytes of the data section", where, data_size);
    }
    for (Position p = begin; p < end; ++p) positions.push_back(p);
    previous_end = end;
  }
  return positions;
}

// A float side is [1, Hkv, rows, dim] of `dtype`; a quantized one U8 stored rows
// [1, Hkv, rows, RowBytes(dtype, dim)].
const detail::TensorTable::value_type* TensorOf(detail::TensorTable& tensors,
                                                const std::string& name, DType dtype,
                                                std::int64_t heads, std::int64_t rows,
                                                std::int64_t dim) {
  const auto it = tensors.find(name);
  if (it == tensors.end()) Bad("tensor {} is missing", name);
  detail::TensorEntry& e = it->second;
  e.used = true;
  const bool quantized = IsQuantized(dtype);
  const std::int64_t last = quantized ? static_cast<std::int64_t>(RowBytes(dtype, dim)) : dim;
  if (e.u8 != quantized || (!quantized && e.dtype != dtype) || e.shape[0] != 1 ||
      e.shape[1] != heads || e.shape[2] != rows || e.shape[3] != last) {
    Bad("tensor {} is {} [{}, {}, {}, {}], expected {} [1, {}, {}, {}]", name,
        detail::EntryDTypeName(e), e.shape[0], e.shape[1], e.shape[2], e.shape[3],
        quantized ? "U8" : DTypeName(dtype), heads, rows, last);
  }
  return &*it;
}

// The pool's dtypes as the file must name them: a safetensors dtype string for
// a float pool, {"keys": side, "values": side} (quantized_side.h) for a quantized one.
void ExpectDtypes(const json& cache, const CausalCacheOptions& o, const std::string& where) {
  const DType value_dtype = o.value_dtype.value_or(o.dtype);
  const json& stated = detail::Field(cache, "dtype", where);
  const std::string pool = IsQuantized(o.dtype)
                               ? fmt::format("{} keys / {} values", o.dtype, value_dtype)
                               : std::string(DTypeName(o.dtype));
  if (!stated.is_object()) {
    const DType dtype = detail::ParseDType(detail::String(cache, "dtype", where), where + ".dtype");
    if (dtype != o.dtype || IsQuantized(o.dtype))
      Bad("{}.dtype is {} in the file, {} in the pool", where, DTypeName(dtype), pool);
    return;
  }
  const DType keys = detail::ParseQuantizedSide(detail::Field(stated, "keys", where + ".dtype"),
                                                o.key_dim, where + ".dtype.keys");
  const DType values = detail::ParseQuantizedSide(detail::Field(stated, "values", where + ".dtype"),
                                                  o.value_dim, where + ".dtype.values");
  if (keys != o.dtype || values != value_dtype) {
    Bad("{}.dtype is {} keys / {} values in the file, {} in the pool", where, keys, values, pool);
  }
}

CachePlan ParseCache(const json& cache, const CausalCacheOptions& o, std::size_t c,
                     detail::TensorTable& tensors, std::uint64_t data_size) {
  const std::string where = fmt::format("caches[{}]", c);
  if (!cache.is_object()) Bad("{} is {}, not an object", where, detail::Describe(cache));
  Expect(detail::Int(cache, "layers", where, 1, INT_MAX), o.layers, "layers", where);
  Expect(detail::Int(cache, "kv_heads", where, 1, INT_MAX), o.kv_heads, "kv_heads", where);
  Expect(detail::Int(cache, "key_dim", where, 1, INT_MAX), o.key_dim, "key_dim", where);
  Expect(detail::Int(cache, "value_dim", where, 1, INT_MAX), o.value_dim, "value_dim", where);
  Expect(detail::Int(cache, "window", where, 0, INT_MAX), o.window, "window", where);
  Expect(detail::Int(cache, "chunk", where, 0, INT_MAX), o.chunk, "chunk", where);
  ExpectDtypes(cache, o, where);
  CachePlan plan;
  plan.positions =
      ParseRuns(detail::Field(cache, "positions", where), where + ".positions", data_size);
  if (o.window == 0 && plan.positions.front() != 0) {
    Bad("{}.positions start at {}, but a cache without a window holds a sequence from 0", where,
        plan.positions.front());
  }
  const auto rows = static_cast<std::int64_t>(plan.positions.size());
  for (int l = 0; l < o.layers; ++l) {
    plan.keys.push_back(TensorOf(tensors, detail::SequenceTensorName(c, l, "keys"), o.dtype,
                                 o.kv_heads, rows, o.key_dim));
    plan.values.push_back(TensorOf(tensors, detail::SequenceTensorName(c, l, "values"),
                                   o.value_dtype.value_or(o.dtype), o.kv_heads, rows, o.value_dim));
  }
  return plan;
}

struct Decoded {
  SavedSequence saved;
  std::vector<CacheData> data;  // per cache
};

Decoded Decode(const detail::ByteSource& source, std::span<CausalCache* const> caches) {
  const detail::FileHeader file =
      detail::ReadHeader(source, detail::kSequenceHeaderLimit, "16 MiB for a sequence file");
  const json& metadata =
      detail::CheckedMetadata(file.header, detail::kSequenceFormat, detail::kSequenceVersion);
  Decoded out;
  out.saved.metadata = detail::UserEntries(metadata, detail::kSequenceOwnKeys);
  const json list = detail::ParseBounded(detail::String(metadata, "caches", "__metadata__"),
                                         "__metadata__.caches");
  if (!list.is_array() || list.size() != caches.size()) {
    Bad("the file has {} caches, the model {}", list.is_array() ? list.size() : 0, caches.size());
  }
  detail::TensorTable tensors = detail::ParseTensors(file.header, file.data_size);
  detail::AttachChecksums(
      tensors, detail::ParseBounded(detail::String(metadata, "checksums", "__metadata__"),
                                    "__metadata__.checksums"));
  std::vector<CachePlan> plans;
  for (std::size_t c = 0; c < caches.size(); ++c) {
    plans.push_back(ParseCache(list[c], caches[c]->Options(), c, tensors, file.data_size));
    const Position next = plans[c].positions.back() + 1;
    if (c > 0 && next != out.saved.next_position) {
      Bad("caches[{}] ends at position {}, caches[0] at {}", c, next - 1,
          out.saved.next_position - 1);
    }
    out.saved.next_position = next;
  }
  detail::CheckAllUsed(tensors, "cache layer");
  out.saved.tokens =
      detail::Tokens(detail::ParseBounded(detail::String(metadata, "tokens", "__metadata__"),
                                          "__metadata__.tokens"),
                     "__metadata__.tokens");
  for (std::size_t c = 0; c < plans.size(); ++c) {
    CachePlan& plan = plans[c];
    const CausalCacheOptions& o = caches[c]->Options();
    CacheData data;
    data.positions = std::move(plan.positions);
    const auto rows = static_cast<std::int64_t>(data.positions.size());
    for (std::size_t l = 0; l < plan.keys.size(); ++l) {
      if (!IsQuantized(o.dtype)) {
        data.keys.push_back(detail::ReadTensor(source, file.data_offset, *plan.keys[l]));
        data.values.push_back(detail::ReadTensor(source, file.data_offset, *plan.values[l]));
        continue;
      }
      const DType value_dtype = o.value_dtype.value_or(o.dtype);
      data.key_rows.push_back(detail::ReadBytes(source, file.data_offset, *plan.keys[l]));
      data.value_rows.push_back(detail::ReadBytes(source, file.data_offset, *plan.values[l]));
      detail::BadScaleError(detail::FirstBadScale(data.key_rows.back(), o.dtype, o.key_dim, rows),
                            o.dtype, plan.keys[l]->first);
      detail::BadScaleError(
          detail::FirstBadScale(data.value_rows.back(), value_dtype, o.value_dim, rows),
          value_dtype, plan.values[l]->first);
    }
    out.data.push_back(std::move(data));
  }
  return out;
}

// Stores one cache's part of the sequence into dst, in passes of at most
// max_batch tokens.
void Store(CausalCache& cache, SequenceId dst, const CacheData& data) {
  if (!cache.SequencePositions(dst).empty()) cache.Remove(dst, 0, kEndOfSequence);
  if (!data.key_rows.empty()) {
    // Quantized rows go in as bits: Update would quantize them a second time.
    const std::unique_ptr<SequenceSnapshot> rows =
        detail::SequenceFromRows(cache.Options(), data.positions, data.key_rows, data.value_rows);
    cache.RestoreSequence(dst, *rows);
    return;
  }
  const auto n = static_cast<std::int64_t>(data.positions.size());
  const std::int64_t step = std::max<std::int64_t>(1, cache.Options().max_batch);
  for (std::int64_t begin = 0; begin < n; begin += step) {
    const std::int64_t end = std::min(n, begin + step);
    const std::vector<SequenceId> sequences(static_cast<std::size_t>(end - begin), dst);
    const std::span<const Position> positions(data.positions.data() + begin,
                                              static_cast<std::size_t>(end - begin));
    cache.StartForward(Batch{positions, sequences});
    for (std::size_t l = 0; l < data.keys.size(); ++l) {
      cache.Update(static_cast<int>(l), data.keys[l].Slice(2, begin, end),
                   data.values[l].Slice(2, begin, end));
    }
  }
}

SavedSequence Load(const detail::ByteSource& source, std::span<CausalCache* const> caches,
                   SequenceId dst) {
  if (caches.empty()) throw Error(fmt::format("[{}] caches is empty", kFn));
  for (std::size_t c = 0; c < caches.size(); ++c) {
    if (caches[c] == nullptr) throw Error(fmt::format("[{}] caches[{}] is null", kFn, c));
  }
  Decoded decoded = detail::Prefixed(kFn, [&] {
    try {
      return Decode(source, caches);
    } catch (const json::exception& e) {
      Bad("malformed header: {}", e.what());
    }
  });
  std::vector<std::unique_ptr<SequenceCache::State>> saved;
  saved.reserve(caches.size());
  for (const CausalCache* cache : caches) saved.push_back(cache->SaveState());
  std::size_t c = 0;
  try {
    for (; c < caches.size(); ++c) Store(*caches[c], dst, decoded.data[c]);
  } catch (const Error& e) {
    for (std::size_t i = 0; i < caches.size(); ++i) caches[i]->RestoreState(*saved[i]);
    throw Error(fmt::format("[{}] caches[{}] cannot take the {} saved tokens into seq {}: {}", kFn,
                            c, decoded.data[c].positions.size(), dst, e.what()));
  }
  return std::move(decoded.saved);
}

}  // namespace

SavedSequence LoadSequence(const std::string& path, std::span<CausalCache* const> caches,
                           SequenceId dst) {
  return Load(detail::FileSource(path, kFn), caches, dst);
}

SavedSequence LoadSequenceFromMemory(std::span<const std::byte> file,
                                     std::span<CausalCache* const> caches, SequenceId dst) {
  return Load(detail::MemorySource(file), caches, dst);
}

}  // namespace ringkv
