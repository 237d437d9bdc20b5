// Cache files and prompt cache files holding quantized (int8 / int4) layers:
// the file's U8 stored rows decode, by the layout docs/cache_file.md documents
// (decoded here by hand), to exactly what the live cache dequantises; a round
// trip restores the same stored rows bit for bit and the same attention
// outputs; every corruption of the quantized encoding is refused naming the
// value, and a refused prompt cache file leaves the prompt cache unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "../../lib/src/prompt/quantized_layer.h"
#include "cache_file_test_util.h"
#include "ringkv/format.h"
#include "ringkv/snapshot_data.h"
#include "support/hadamard_reference.h"

namespace ringkv::test {
namespace {

using nlohmann::json;
using test::ReferenceRotate;

struct QuantSpec {
  const char* name;
  KvStorage storage;
  std::int64_t dim;  // head dim of K and V (int4: a multiple of 32)
};

void PrintTo(const QuantSpec& s, std::ostream* os) { *os << s.name; }
std::string SpecName(const ::testing::TestParamInfo<QuantSpec>& p) { return p.param.name; }

// int8 rows of 30 values are 34 bytes: the blocks pad them to 36, the file does not.
// int4h rows of 96 values rotate blocks of 32 (the largest power of two dividing 96).
const QuantSpec kSpecs[] = {{"int8", KvStorage::Same(DType::kI8), 30},
                            {"int4", KvStorage::Same(DType::kI4), 64},
                            {"int8_keys_int4_values", KvStorage{DType::kI8, DType::kI4}, 32},
                            {"int8_keys_int4h_values", KvStorage{DType::kI8, DType::kI4H}, 96}};

// Two sliding layers (window 8) and a global one, blocks of 3 tokens.
LayerCaches QModel(const QuantSpec& spec) {
  std::vector<LayerCaches::Layer> layers;
  layers.emplace_back(RotatingKVCache(kWindow, kBlock, spec.storage));
  layers.emplace_back(RotatingKVCache(kWindow, kBlock, spec.storage));
  layers.emplace_back(KVCache(kBlock, spec.storage));
  return LayerCaches(std::move(layers));
}

// One forward chunk: every layer's K/V (f32 inputs, quantized by the write) and
// its attention output for the chunk's queries.
std::vector<std::vector<float>> QStep(LayerCaches& caches, std::int64_t length, std::uint32_t seed,
                                      std::int64_t dim, Context& ctx) {
  std::vector<std::vector<float>> outputs;
  for (std::size_t l = 0; l < caches.Size(); ++l) {
    const auto s = seed * 16 + static_cast<std::uint32_t>(l) * 3;
    const KVHistory history =
        caches[l].Update(Values({1, kKvHeads, length, dim}, s, DType::kF32),
                         Values({1, kKvHeads, length, dim}, s + 1, DType::kF32));
    const Tensor q = Values({1, kQueryHeads, length, dim}, s + 2, DType::kF32);
    outputs.push_back(Attention(q, history, AttentionMask::Causal(), 0.2f, ctx).ToVector());
  }
  return outputs;
}

// The file's stored rows [Hkv, slots, RowBytes] decoded by the documented layout:
// int8: `dim` signed bytes then one f32 scale; int4 and int4h: dim / 2 bytes
// (value 2i in the low nibble of byte i, 2i + 1 in the high one, two's
// complement) then dim / 32 f32 scales. x = scale * q, for int4h then rotated
// back (float64, support/hadamard_reference.h).
std::vector<double> DecodeRows(const std::byte* rows, std::size_t count, DType dtype,
                               std::int64_t dim) {
  const auto n = static_cast<std::size_t>(dim);
  const std::size_t groups = dtype == DType::kI8 ? 1 : n / 32;
  const std::size_t data = dtype == DType::kI8 ? n : n / 2;
  const std::size_t row_bytes = data + 4 * groups;
  std::vector<double> out;
  for (std::size_t r = 0; r < count; ++r) {
    const std::byte* row = rows + r * row_bytes;
    std::vector<double> values;
    for (std::size_t i = 0; i < n; ++i) {
      int q = 0;
      if (dtype == DType::kI8) {
        q = static_cast<std::int8_t>(std::to_integer<std::uint8_t>(row[i]));
      } else {
        const auto byte = std::to_integer<unsigned>(row[i / 2]);
        const unsigned nibble = i % 2 == 0 ? byte & 0xFu : byte >> 4;
        q = nibble >= 8 ? static_cast<int>(nibble) - 16 : static_cast<int>(nibble);
      }
      float scale = 0;
      std::memcpy(&scale, row + data + 4 * (dtype == DType::kI8 ? 0 : i / 32), 4);
      values.push_back(static_cast<double>(scale * static_cast<float>(q)));
    }
    if (dtype == DType::kI4H) values = ReferenceRotate(values);
    out.insert(out.end(), values.begin(), values.end());
  }
  return out;
}

// A layer's stored rows and offsets as the cache holds them (its Snapshot(0)).
detail::StoredLayer Stored(const AttentionCache& cache) {
  return detail::ExportStoredRows(*cache.Snapshot(0));
}

void ExpectSameRows(const AttentionCache& got, const AttentionCache& expected, std::size_t l) {
  const detail::StoredLayer a = Stored(got);
  const detail::StoredLayer b = Stored(expected);
  EXPECT_EQ(a.kind, b.kind) << "layer " << l;
  EXPECT_EQ(a.from, b.from) << "layer " << l;
  EXPECT_EQ(a.to, b.to) << "layer " << l;
  EXPECT_EQ(a.ring_index, b.ring_index) << "layer " << l;
  EXPECT_EQ(a.layout, b.layout) << "layer " << l;
  EXPECT_EQ(a.keys, b.keys) << "layer " << l;
  EXPECT_EQ(a.values, b.values) << "layer " << l;
}

class QuantizedCacheFile : public ::testing::TestWithParam<QuantSpec> {
 protected:
  // The caches after `chunks` forward chunks, saved to "caches.safetensors".
  LayerCaches SavedAfter(const std::vector<std::int64_t>& chunks) {
    LayerCaches caches = QModel(GetParam());
    for (const std::int64_t chunk : chunks) QStep(caches, chunk, seed_++, GetParam().dim, ctx_);
    SaveCaches(Path(), caches, Seq(500, caches.Offset()), {{"model", "tiny"}});
    return caches;
  }
  std::string Path() const { return dir_.File("caches.safetensors"); }

  ScratchDir dir_;
  Context ctx_;
  std::uint32_t seed_ = 1;
};

// A wrapped ring (offset 17 > window 8, decode layout) and a prefill chunk
// longer than the window (the ring holds 12 slots).
const std::vector<std::int64_t> kPhases[] = {{5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {12}};

TEST_P(QuantizedCacheFile, TheFileHoldsTheStoredRowsAsDocumented) {
  const QuantSpec& spec = GetParam();
  for (const std::vector<std::int64_t>& phase : kPhases) {
    const LayerCaches caches = SavedAfter(phase);
    Edited file(ReadBytes(Path()));
    for (std::size_t l = 0; l < caches.Size(); ++l) {
      const json& layer = file.caches["layers"][l];
      EXPECT_EQ(layer["storage_dtype"], (json{{"keys", DTypeName(spec.storage.keys)},
                                              {"values", DTypeName(spec.storage.values)}}));
      const auto side = [&](DType dtype) {
        json s{{"dtype", DTypeName(dtype)},
               {"group", dtype == DType::kI8 ? spec.dim : 32},
               {"scales", "f32le_after_data"}};
        if (dtype == DType::kI4H) s["rotation"] = {{"kind", "hadamard"}, {"block", 32}};
        return s;
      };
      EXPECT_EQ(layer["kv"], (json{{"heads", kKvHeads},
                                   {"key_dim", spec.dim},
                                   {"value_dim", spec.dim},
                                   {"keys", side(spec.storage.keys)},
                                   {"values", side(spec.storage.values)}}));
      // The rows in storage order, as the cache dequantises them for attention.
      const SnapshotData dequantised = ExportSnapshot(*caches[l].Snapshot(0));
      const std::int64_t slots = dequantised.keys.Dim(2);
      for (const bool keys : {true, false}) {
        const DType dtype = keys ? spec.storage.keys : spec.storage.values;
        const json& entry = file.header[fmt::format("l{}.{}", l, keys ? "keys" : "values")];
        const auto row_bytes = static_cast<std::int64_t>(RowBytes(dtype, spec.dim));
        EXPECT_EQ(entry["dtype"], "U8");
        ASSERT_EQ(entry["shape"], (json{1, kKvHeads, slots, row_bytes})) << "layer " << l;
        const std::vector<double> decoded =
            DecodeRows(file.data.data() + entry["data_offsets"][0].get<std::size_t>(),
                       static_cast<std::size_t>(kKvHeads * slots), dtype, spec.dim);
        const std::vector<float> cache_reads =
            (keys ? dequantised.keys : dequantised.values).ToVector();
        ASSERT_EQ(decoded.size(), cache_reads.size());
        // s * q is one f32 product; int4h's f32 butterflies round a little more
        // (measured at most 1.8e-7 on values up to 1.1).
        const double tolerance = dtype == DType::kI4H ? 5e-7 : 0.0;
        for (std::size_t i = 0; i < decoded.size(); ++i) {
          ASSERT_NEAR(decoded[i], static_cast<double>(cache_reads[i]), tolerance)
              << "layer " << l << (keys ? " keys" : " values") << " value " << i;
        }
      }
    }
  }
}

TEST_P(QuantizedCacheFile, RoundTripRestoresTheStoredRowsAndTheAttention) {
  const QuantSpec& spec = GetParam();
  for (const std::vector<std::int64_t>& phase : kPhases) {
    LayerCaches original = SavedAfter(phase);
    SavedCaches loaded = LoadCaches(Path());
    EXPECT_EQ(loaded.tokens, Seq(500, original.Offset()));
    ASSERT_EQ(loaded.caches.Size(), original.Size());
    for (std::size_t l = 0; l < original.Size(); ++l) {
      EXPECT_EQ(loaded.caches[l].Storage(), std::optional<KvStorage>(spec.storage));
      ExpectSameRows(loaded.caches[l], original[l], l);
    }
    // Saving what was loaded writes the same file.
    const std::string again = dir_.File("again.safetensors");
    SaveCaches(again, loaded.caches, loaded.tokens, loaded.metadata);
    EXPECT_EQ(ReadBytes(again), ReadBytes(Path()));
    // Decoding on from both (steps, a chunk, steps): the same outputs, bit for bit.
    for (const std::int64_t chunk : {1, 1, 1, 4, 1, 1, 1, 1, 1, 1}) {
      const auto expected = QStep(original, chunk, seed_, spec.dim, ctx_);
      const auto got = QStep(loaded.caches, chunk, seed_, spec.dim, ctx_);
      ++seed_;
      ASSERT_EQ(got, expected) << "at offset " << original.Offset();
    }
  }
}

// A cache given NaN stores a NaN scale (dtype.h), which no file may hold:
// SaveCaches refuses it naming the row, and writes nothing.
TEST_P(QuantizedCacheFile, ANanScaleIsNeverWritten) {
  const QuantSpec& spec = GetParam();
  LayerCaches caches = QModel(spec);
  QStep(caches, 4, 1, spec.dim, ctx_);
  std::vector<float> keys = Values({1, kKvHeads, 1, spec.dim}, 9, DType::kF32).ToVector();
  keys[static_cast<std::size_t>(spec.dim) + 3] = std::numeric_limits<float>::quiet_NaN();  // head 1
  const Tensor values = Values({1, kKvHeads, 1, spec.dim}, 10, DType::kF32);
  for (std::size_t l = 0; l < caches.Size(); ++l) {
    caches[l].Update(Tensor::FromVector(keys, {1, kKvHeads, 1, spec.dim}), values);
  }
  try {
    SaveCaches(Path(), caches, Seq(1, 5), {});
    ADD_FAILURE() << "saved";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[SaveCaches] tensor l0.keys row [0, 1, 4] (kv head 1, slot 4) has"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("scale nan in group 0"), std::string::npos) << what;
  }
  EXPECT_FALSE(std::filesystem::exists(Path()));
}

std::int64_t LastGroup(DType dtype, std::int64_t dim) { return IsInt4(dtype) ? dim / 32 - 1 : 0; }

// The bytes of tensor `name`'s scale `group` of row (head, slot) in `f`.
std::byte* ScaleAt(Edited& f, const std::string& name, DType dtype, std::int64_t dim,
                   std::int64_t head, std::int64_t slot, std::int64_t group) {
  const json& entry = f.header[name];
  const auto slots = entry["shape"][2].get<std::int64_t>();
  const std::size_t row_bytes = RowBytes(dtype, dim);
  const std::size_t data =
      dtype == DType::kI8 ? static_cast<std::size_t>(dim) : static_cast<std::size_t>(dim / 2);
  return f.data.data() + entry["data_offsets"][0].get<std::size_t>() +
         static_cast<std::size_t>(head * slots + slot) * row_bytes + data +
         static_cast<std::size_t>(group) * 4;
}

// The header's checksum of `name` recomputed from the (edited) data.
void FixChecksum(Edited& f, const std::string& name) {
  json checksums = json::parse(f.Meta()["checksums"].get<std::string>());
  const json& entry = f.header[name];
  const auto begin = entry["data_offsets"][0].get<std::size_t>();
  const auto end = entry["data_offsets"][1].get<std::size_t>();
  checksums[name] = CraftedFile::Hex(XXH3_64bits(f.data.data() + begin, end - begin));
  f.Meta()["checksums"] = checksums.dump();
}

TEST_P(QuantizedCacheFile, CorruptedQuantizedLayersAreRefusedNamingTheValue) {
  const QuantSpec& spec = GetParam();
  SavedAfter(kPhases[0]);
  const std::vector<std::byte> valid = ReadBytes(Path());
  ASSERT_EQ(LoadCachesFromMemory(Edited(valid).Bytes()).caches.Offset(), 17);
  {
    Edited f(valid);
    f.caches["layers"][2]["kv"]["keys"]["dtype"] = "int2";
    ExpectRefused(f.Bytes(), "caches.layers[2].kv.keys.dtype is \"int2\", not int8, int4 or int4h");
  }
  {
    Edited f(valid);
    f.caches["layers"][1]["kv"]["values"]["group"] = 16;
    ExpectRefused(f.Bytes(), "caches.layers[1].kv.values.group is 16, but");
  }
  {
    Edited f(valid);
    f.caches["layers"][0]["kv"]["keys"]["scales"] = "f16_before_data";
    ExpectRefused(f.Bytes(), "caches.layers[0].kv.keys.scales is \"f16_before_data\"");
  }
  if (spec.storage.values == DType::kI4H) {  // dim 96: blocks of 32
    {
      Edited f(valid);
      f.caches["layers"][1]["kv"]["values"]["rotation"]["block"] = 96;
      ExpectRefused(f.Bytes(),
                    "caches.layers[1].kv.values.rotation.block is 96, but int4h rows of 96 values "
                    "rotate blocks of 32");
    }
    {
      Edited f(valid);
      f.caches["layers"][2]["kv"]["values"]["rotation"]["kind"] = "walsh";
      ExpectRefused(f.Bytes(),
                    "caches.layers[2].kv.values.rotation.kind is \"walsh\", not \"hadamard\"");
    }
    {
      Edited f(valid);
      f.caches["layers"][0]["kv"]["values"].erase("rotation");
      ExpectRefused(f.Bytes(), "caches.layers[0].kv.values.rotation is missing or not an object");
    }
  }
  {
    // A float dtype next to the per-side objects: neither layout.
    Edited f(valid);
    f.caches["layers"][0]["kv"]["dtype"] = "F32";
    ExpectRefused(f.Bytes(), "caches.layers[0].kv has both a dtype and per-side");
  }
  {
    // The storage dtypes and the stored K/V disagree.
    Edited f(valid);
    const DType other = spec.storage.keys == DType::kI8 ? DType::kI4 : DType::kI8;
    f.caches["layers"][2]["storage_dtype"]["keys"] = DTypeName(other);
    ExpectRefused(f.Bytes(),
                  fmt::format("caches.layers[2].kv holds keys as {}", spec.storage.keys));
  }
  {
    Edited f(valid);
    f.caches["layers"][2]["storage_dtype"] = json{{"keys", "int8"}, {"values", "f16"}};
    ExpectRefused(f.Bytes(),
                  "caches.layers[2].storage_dtype.values is \"f16\", not int8, int4 or int4h");
  }
  {
    // Rows of the wrong size: the same bytes as twice the slots of half rows.
    Edited f(valid);
    const auto row_bytes = static_cast<std::int64_t>(RowBytes(spec.storage.keys, spec.dim));
    json& shape = f.header["l2.keys"]["shape"];
    shape[2] = shape[2].get<std::int64_t>() * 2;
    shape[3] = row_bytes / 2;
    ExpectRefused(f.Bytes(),
                  fmt::format("tensor l2.keys is U8 [1, 2, 34, {}], expected U8 [1, 2, "
                              "slots, {}] ({} rows of {} values are {} bytes",
                              row_bytes / 2, row_bytes, spec.storage.keys, spec.dim, row_bytes));
  }
  {
    // Float elements where stored rows belong.
    Edited f(valid);
    f.header["l2.values"]["dtype"] = "F32";
    ExpectRefused(f.Bytes(), "tensor l2.values");
  }
  const float bad_scales[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(), -0.5f};
  const char* const bad_names[] = {"nan", "inf", "-0.5"};
  for (std::size_t b = 0; b < 3; ++b) {
    for (const bool keys : {true, false}) {
      Edited f(valid);
      const DType dtype = keys ? spec.storage.keys : spec.storage.values;
      const std::string name = keys ? "l2.keys" : "l2.values";
      const std::int64_t group = LastGroup(dtype, spec.dim);
      std::memcpy(ScaleAt(f, name, dtype, spec.dim, 1, 16, group), &bad_scales[b], 4);
      FixChecksum(f, name);
      ExpectRefused(f.Bytes(),
                    fmt::format("tensor {} row [0, 1, 16] (kv head 1, slot 16) has {} scale {} in "
                                "group {}, not a finite value >= 0",
                                name, dtype, bad_names[b], group));
    }
  }
  {
    // A scale in a sliding layer's ring, and without a fixed checksum: the
    // checksum speaks first.
    Edited f(valid);
    std::memcpy(ScaleAt(f, "l0.keys", spec.storage.keys, spec.dim, 0, 3, 0), &bad_scales[0], 4);
    ExpectRefused(f.Bytes(), "tensor l0.keys has checksum");
    FixChecksum(f, "l0.keys");
    ExpectRefused(f.Bytes(), "tensor l0.keys row [0, 0, 3] (kv head 0, slot 3)");
  }
  // Every truncation is refused.
  for (std::size_t size = 0; size < valid.size(); size += 7) {
    const std::string what =
        Refusal(std::vector<std::byte>(valid.begin(), valid.begin() + static_cast<long>(size)));
    ASSERT_EQ(what.rfind("[LoadCaches] ", 0), 0u) << "size " << size << ": " << what;
  }
  ExpectRefused(std::vector<std::byte>(valid.begin(), valid.end() - 1), "(truncated?)");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, QuantizedCacheFile, ::testing::ValuesIn(kSpecs), SpecName);

// Deterministic K/V of (position, token, head, element): a prefix restored from
// the prompt cache holds what a fresh forward over it would.
float Coded(int position, int token, std::int64_t h, std::int64_t d, int side) {
  std::uint32_t x = static_cast<std::uint32_t>(position) * 0x9E3779B9u ^
                    static_cast<std::uint32_t>(token) * 0x85EBCA6Bu ^
                    static_cast<std::uint32_t>(h * 131 + d * 7 + side) * 0xC2B2AE35u;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  return static_cast<float>(x >> 8) * 0x1p-23f - 1.0f;
}

// One chunk of tokens into every layer; each layer's attention output.
std::vector<std::vector<float>> QForward(LayerCaches& caches, std::span<const int> tokens,
                                         std::int64_t dim, Context& ctx) {
  const int offset = caches[0].Offset();
  const auto n = static_cast<std::int64_t>(tokens.size());
  std::vector<float> k, v;
  for (std::int64_t h = 0; h < kKvHeads; ++h) {
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t d = 0; d < dim; ++d) {
        const int p = offset + static_cast<int>(i);
        const int t = tokens[static_cast<std::size_t>(i)];
        k.push_back(Coded(p, t, h, d, 0));
        v.push_back(Coded(p, t, h, d, 1));
      }
    }
  }
  const Tensor keys = Tensor::FromVector(k, {1, kKvHeads, n, dim});
  const Tensor values = Tensor::FromVector(v, {1, kKvHeads, n, dim});
  const Tensor q =
      Values({1, kQueryHeads, n, dim}, static_cast<std::uint32_t>(offset), DType::kF32);
  std::vector<std::vector<float>> outputs;
  for (std::size_t l = 0; l < caches.Size(); ++l) {
    const KVHistory history = caches[l].Update(keys, values);
    outputs.push_back(Attention(q, history, AttentionMask::Causal(), 0.2f, ctx).ToVector());
  }
  return outputs;
}

class QuantizedPromptFile : public ::testing::TestWithParam<QuantSpec> {
 protected:
  void SetUp() override {
    // A pinned system prompt and two conversations longer than the window.
    Serve(Seq(100, 6));
    source_.Pin(Seq(100, 6));
    Serve(Cat(Seq(100, 6), Seq(200, 9)));
    Serve(Cat(Seq(100, 6), Seq(300, 11)));
    source_.Save(path_);
    file_ = ReadBytes(path_);
  }
  void Serve(const std::vector<int>& tokens) {
    const PrefixMatch match = source_.Lookup(tokens);
    source_.Prefill(tokens, match, [&](std::span<const int> chunk) {
      QForward(source_caches_, chunk, GetParam().dim, ctx_);
    });
    source_.Commit(tokens);
  }

  ScratchDir scratch_;
  std::string path_ = (scratch_.Path() / "cache.safetensors").string();
  Context ctx_;
  LayerCaches source_caches_ = QModel(GetParam());
  PromptCache source_{source_caches_, Options(std::size_t{1} << 30)};
  std::vector<std::byte> file_;
};

TEST_P(QuantizedPromptFile, RoundTripRestoresTheTriesSnapshotsBitForBit) {
  const QuantSpec& spec = GetParam();
  LayerCaches caches = QModel(spec);
  PromptCache loaded(caches, Options(std::size_t{1} << 30));
  loaded.Load(path_);
  ASSERT_EQ(loaded.Nodes().size(), source_.Nodes().size());
  for (std::size_t i = 0; i < loaded.Nodes().size(); ++i) {
    EXPECT_EQ(loaded.Nodes()[i].tokens, source_.Nodes()[i].tokens) << i;
    EXPECT_EQ(loaded.Nodes()[i].bytes, source_.Nodes()[i].bytes) << i;
  }
  const std::string again = (scratch_.Path() / "again.safetensors").string();
  loaded.Save(again);
  EXPECT_EQ(ReadBytes(again), file_);
  for (const std::vector<int>& turn :
       {Cat(Cat(Seq(100, 6), Seq(300, 11)), {5}), Cat(Cat(Seq(100, 6), Seq(200, 9)), {5}),
        Cat(Seq(100, 6), {7})}) {
    const int reused = source_.Lookup(turn).reused;
    ASSERT_EQ(loaded.Lookup(turn).reused, reused);
    ASSERT_GT(reused, 0);
    for (std::size_t l = 0; l < caches.Size(); ++l) ExpectSameRows(caches[l], source_caches_[l], l);
    // The next token attends over the restored rows: the same outputs, bit for bit.
    const std::span<const int> next =
        std::span<const int>(turn).subspan(static_cast<std::size_t>(reused), 1);
    EXPECT_EQ(QForward(caches, next, spec.dim, ctx_),
              QForward(source_caches_, next, spec.dim, ctx_));
  }
}

TEST_P(QuantizedPromptFile, ACorruptedFileLeavesThePromptCacheUnchanged) {
  const QuantSpec& spec = GetParam();
  LayerCaches caches = QModel(spec);
  PromptCache target(caches, Options(std::size_t{1} << 30));
  target.Load(path_);
  const std::vector<PromptNodeInfo> before = target.Nodes();
  const auto refused = [&](const std::vector<std::byte>& file) -> std::string {
    try {
      target.LoadFromMemory(file);
    } catch (const SnapshotError& e) {
      return e.what();
    }
    return "(loaded)";
  };
  const auto expect_unchanged = [&] {
    const std::vector<PromptNodeInfo> after = target.Nodes();
    ASSERT_EQ(after.size(), before.size());
    for (std::size_t i = 0; i < after.size(); ++i) {
      EXPECT_EQ(after[i].tokens, before[i].tokens);
      EXPECT_EQ(after[i].bytes, before[i].bytes);
    }
    EXPECT_EQ(target.Lookup(Cat(Seq(100, 6), {7})).reused, 6);
  };
  {
    // A NaN scale in the global layer of the second node, checksum fixed.
    CraftedFile f = CraftedFile::Parse(file_);
    const std::string name = "n1.l2.values";
    const json& entry = f.header[name];
    const std::size_t data = spec.storage.values == DType::kI8
                                 ? static_cast<std::size_t>(spec.dim)
                                 : static_cast<std::size_t>(spec.dim / 2);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(f.data.data() + entry["data_offsets"][0].get<std::size_t>() + data, &nan, 4);
    f.RecomputeTensorChecksums();
    const std::string what = refused(f.Bytes());
    EXPECT_NE(what.find(fmt::format("[PromptCache::Load] tensor n1.l2.values row [0, 0, 0] (kv "
                                    "head 0, slot 0) has {} scale nan in group 0",
                                    spec.storage.values)),
              std::string::npos)
        << what;
    expect_unchanged();
  }
  {
    CraftedFile f = CraftedFile::Parse(file_);
    f.model["layers"][1]["kv"]["keys"]["dtype"] = "int3";
    const std::string what = refused(f.Bytes());
    EXPECT_NE(what.find("kv.keys.dtype is \"int3\", not int8, int4 or int4h"), std::string::npos)
        << what;
    expect_unchanged();
  }
  {
    CraftedFile f = CraftedFile::Parse(file_);
    f.model["layers"][2]["kv"]["values"]["group"] = 64;
    const std::string what = refused(f.Bytes());
    EXPECT_NE(what.find("kv.values.group is 64"), std::string::npos) << what;
    expect_unchanged();
  }
  {
    const std::string what =
        refused(std::vector<std::byte>(file_.begin(), file_.end() - 3));  // truncated data
    EXPECT_EQ(what.rfind("[PromptCache::Load] ", 0), 0u) << what;
    expect_unchanged();
  }
}

// As SaveCaches: a trie snapshot holding a NaN scale is refused, nothing written.
TEST_P(QuantizedPromptFile, ANanScaleIsNeverWritten) {
  const QuantSpec& spec = GetParam();
  LayerCaches caches = QModel(spec);
  PromptCache pc(caches, Options(std::size_t{1} << 30));
  const std::vector<int> tokens = Seq(1, 5);
  pc.Prefill(tokens, pc.Lookup(tokens), [&](std::span<const int> chunk) {
    const auto n = static_cast<std::int64_t>(chunk.size());
    std::vector<float> kv(static_cast<std::size_t>(kKvHeads * n * spec.dim), 0.5f);
    kv[0] = std::numeric_limits<float>::quiet_NaN();  // head 0, the chunk's first slot
    const Tensor t = Tensor::FromVector(kv, {1, kKvHeads, n, spec.dim});
    for (std::size_t l = 0; l < caches.Size(); ++l) caches[l].Update(t, t);
  });
  pc.Commit(tokens);
  const std::string path = (scratch_.Path() / "nan.safetensors").string();
  try {
    pc.Save(path);
    ADD_FAILURE() << "saved";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[PromptCache::Save] tensor n0.l0.keys row [0, 0, 0] (kv head 0, slot 0) "
                        "has"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("scale nan in group 0"), std::string::npos) << what;
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

// Nodes past the budget are checked without being imported: their scales too.
TEST_P(QuantizedPromptFile, AScaleInANodeTheBudgetDropsIsCheckedToo) {
  const QuantSpec& spec = GetParam();
  const std::vector<PromptNodeInfo> nodes = source_.Nodes();
  ASSERT_EQ(nodes.size(), 3u);
  ASSERT_TRUE(nodes[0].pinned);
  LayerCaches caches = QModel(spec);
  PromptCache small(caches, Options(nodes[0].bytes));  // room for the pinned node only
  small.LoadFromMemory(file_);
  ASSERT_EQ(small.Nodes().size(), 1u);
  CraftedFile f = CraftedFile::Parse(file_);
  const std::string name = "n2.l0.keys";
  const json& entry = f.header[name];
  const auto slots = entry["shape"][2].get<std::int64_t>();
  const float inf = std::numeric_limits<float>::infinity();
  // The last scale of the last row.
  std::memcpy(f.data.data() + entry["data_offsets"][1].get<std::size_t>() - 4, &inf, 4);
  f.RecomputeTensorChecksums();
  try {
    small.LoadFromMemory(f.Bytes());
    ADD_FAILURE() << "loaded";
  } catch (const SnapshotError& e) {
    const std::string what = e.what();
    EXPECT_NE(
        what.find(fmt::format("tensor n2.l0.keys row [0, {}, {}] (kv head {}, slot {}) has {} "
                              "scale inf in group {}",
                              kKvHeads - 1, slots - 1, kKvHeads - 1, slots - 1, spec.storage.keys,
                              LastGroup(spec.storage.keys, spec.dim))),
        std::string::npos)
        << what;
  }
  ASSERT_EQ(small.Nodes().size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, QuantizedPromptFile, ::testing::ValuesIn(kSpecs), SpecName);

}  // namespace
}  // namespace ringkv::test
