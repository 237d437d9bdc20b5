#pragma once
// The model and the files the caches file tests share: three layers (two
// sliding, one global) of f32/f16/bf16 K/V from a deterministic generator, a
// forward step that returns every layer's attention output, and a fixture with
// a scratch directory and a small valid file.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "file_craft.h"
#include "prompt_test_util.h"
#include "ringkv/attention.h"
#include "ringkv/cache_file.h"
#include "ringkv/error.h"
#include "scratch_dir.h"

namespace ringkv::test {

inline constexpr std::int64_t kKvHeads = 2;
inline constexpr std::int64_t kQueryHeads = 4;
inline constexpr std::int64_t kHeadDim = 8;
inline constexpr int kWindow = 8;
inline constexpr std::int64_t kBlock = 3;  // divides neither the window nor the offsets

// Deterministic values in [-1, 1), from a per-call seed.
inline Tensor Values(const Shape& shape, std::uint32_t seed, DType dtype) {
  std::vector<float> values(static_cast<std::size_t>(shape.NumElements()));
  std::uint32_t state = 0x9E3779B9u * (seed + 1);
  for (float& v : values) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) * 0x1p-23f - 1.0f;
  }
  return Tensor::FromVector(values, shape, dtype);
}

// Three layers: sliding (window 8), sliding, global.
inline LayerCaches Model() { return LayerCaches::Interleaved(3, 3, kWindow, kBlock); }

// One forward chunk of `length` tokens: every layer's K/V appended and its
// attention output for queries of the step, per layer.
inline std::vector<std::vector<float>> Step(LayerCaches& caches, std::int64_t length,
                                            std::uint32_t seed, DType dtype, Context& ctx) {
  std::vector<std::vector<float>> outputs;
  for (std::size_t l = 0; l < caches.Size(); ++l) {
    const auto s = seed * 16 + static_cast<std::uint32_t>(l) * 3;
    const KVHistory history =
        caches[l].Update(Values({1, kKvHeads, length, kHeadDim}, s, dtype),
                         Values({1, kKvHeads, length, kHeadDim}, s + 1, dtype));
    const Tensor q = Values({1, kQueryHeads, length, kHeadDim}, s + 2, dtype);
    outputs.push_back(Attention(q, history, AttentionMask::Causal(), 0.35f, ctx).ToVector());
  }
  return outputs;
}

class CacheFileTest : public ::testing::Test {
 protected:
  // A small valid file: offset 5, tokens and one metadata entry.
  std::vector<std::byte> Valid() {
    LayerCaches caches = Model();
    Step(caches, 5, 1, DType::kF32, ctx_);
    SaveCaches(dir_.File("valid.safetensors"), caches, Seq(7, 5), {{"k", "v"}});
    return ReadBytes(dir_.File("valid.safetensors"));
  }

  std::set<std::string> Files() const {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_.Path())) {
      names.insert(e.path().filename().string());
    }
    return names;
  }

  ScratchDir dir_;
  Context ctx_;
};

// A caches file taken apart, edited and put back together with a valid
// metadata checksum (recomputed independently: XXH3 over each entry's key and
// value, each prefixed by its length), so the loader gets past that check.
struct Edited {
  nlohmann::json header;
  nlohmann::json caches;
  std::vector<std::byte> data;

  explicit Edited(const std::vector<std::byte>& file) {
    const std::uint64_t n = CraftedFile::LengthField(file);
    const auto* text = reinterpret_cast<const char*>(file.data() + 8);
    header = nlohmann::json::parse(text, text + n);
    caches = nlohmann::json::parse(header["__metadata__"]["caches"].get<std::string>());
    data.assign(file.begin() + static_cast<long>(8 + n), file.end());
  }

  nlohmann::json& Meta() { return header["__metadata__"]; }

  std::vector<std::byte> Bytes(bool fix_checksum = true) {
    Meta()["caches"] = caches.dump();
    if (fix_checksum) {
      std::string joined;
      for (const auto& [key, value] : Meta().items()) {
        if (key == "metadata_checksum") continue;
        const std::string& v = value.get_ref<const std::string&>();
        joined += std::to_string(key.size()) + ":" + key + std::to_string(v.size()) + ":" + v;
      }
      Meta()["metadata_checksum"] = CraftedFile::Hex(XXH3_64bits(joined.data(), joined.size()));
    }
    return CraftedFile::Assemble(header.dump(), data);
  }
};

// The whole message, for a refused file.
inline std::string Refusal(const std::vector<std::byte>& file) {
  try {
    (void)LoadCachesFromMemory(file);
  } catch (const SnapshotError& e) {
    return e.what();
  }
  return "(loaded)";
}

inline void ExpectRefused(const std::vector<std::byte>& file, const std::string& needle) {
  const std::string what = Refusal(file);
  EXPECT_EQ(what.rfind("[LoadCaches] ", 0), 0u) << what;
  EXPECT_NE(what.find(needle), std::string::npos) << what;
}

}  // namespace ringkv::test
