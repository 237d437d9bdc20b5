// Writes the seed corpus of the loader fuzzers: small valid prompt cache files
// for the fuzz model (fuzz_model.h), one file per class of hostile input the
// prompt cache loader refuses (so mutations start next to each rejection path),
// and caches files (SaveCaches) at each ring phase.
// Usage: ringkv_prompt_fuzz_seeds <directory>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "file_craft.h"  // tests/prompt: rebuilds files with valid checksums
#include "fuzz_model.h"
#include "ringkv/cache_file.h"
#include "ringkv/sequence_file.h"

namespace {

using nlohmann::json;
using ringkv::test::CraftedFile;
using ringkv::test::ReadBytes;

// Serves `tokens` the way a decode loop does: lookup, chunked prefill, commit.
void Serve(ringkv::PromptCache& cache, ringkv::LayerCaches& caches,
           const std::vector<int>& tokens) {
  const ringkv::PrefixMatch match = cache.Lookup(tokens);
  cache.Prefill(tokens, match,
                [&](std::span<const int> chunk) { ringkv::fuzz::Feed(caches, chunk); });
  cache.Commit(tokens);
}

void WriteBytes(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// A file of `count` one-token nodes: all children of the root, or a chain.
std::vector<std::byte> OneTokenNodes(const std::vector<std::byte>& one, int count, bool chain) {
  CraftedFile f = CraftedFile::Parse(one);
  const json node = f.nodes[0];
  json header = json::object();
  header["__metadata__"] = f.header["__metadata__"];
  const std::vector<std::byte> base = f.data;
  f.nodes = json::array();
  f.data.clear();
  for (int i = 0; i < count; ++i) {
    json n = node;
    n["parent"] = chain ? i - 1 : -1;
    n["start"] = chain ? i : 0;
    n["end"] = n["start"].get<int>() + 1;
    n["tokens"] = {chain ? i % 3 : i};
    n["last_used"] = i;
    for (std::size_t l = 0; l < n["layers"].size(); ++l) {
      json& layer = n["layers"][l];
      // A chain keeps no windows for the sliding layer 0 (fuzz_model.h): one
      // slot taken at offset 1 is no window at a deeper offset.
      if (chain && l == 0) layer = nullptr;
      if (layer.is_null()) continue;
      for (const char* kv : {"keys", "values"}) {
        const std::string old = layer[kv].get<std::string>();
        const std::string name = "n" + std::to_string(i) + old.substr(old.find('.'));
        json entry = f.header[old];
        const auto b = entry["data_offsets"][0].get<std::uint64_t>();
        const auto e = entry["data_offsets"][1].get<std::uint64_t>();
        const std::uint64_t at = f.data.size();
        entry["data_offsets"] = {at, at + (e - b)};
        f.data.insert(f.data.end(), base.begin() + static_cast<std::ptrdiff_t>(b),
                      base.begin() + static_cast<std::ptrdiff_t>(e));
        header[name] = entry;
        layer[kv] = name;
      }
      layer["from"] = n["start"];
      layer["to"] = n["end"];
    }
    f.nodes.push_back(std::move(n));
  }
  f.header = std::move(header);
  f.RecomputeTensorChecksums();
  return f.Bytes();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <directory>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  ringkv::LayerCaches caches = ringkv::fuzz::FuzzCaches();
  ringkv::PromptCache cache(caches, ringkv::fuzz::FuzzOptions());
  // One short entry inside the window (an unwrapped ring).
  Serve(cache, caches, {1, 2, 3});
  cache.Save(dir + "/short.safetensors");
  // A pinned prefix, a branch past the window, a repeat (a one-token node).
  cache.Pin(std::vector<int>{1, 2, 3});
  Serve(cache, caches, {1, 2, 3, 4, 5, 6, 7});
  Serve(cache, caches, {1, 2, 3, 9, 8});
  Serve(cache, caches, {1, 2, 3, 9, 8});
  cache.Save(dir + "/branches.safetensors");
  cache.SaveEntry(dir + "/entry.safetensors", std::vector<int>{1, 2, 3, 4, 5, 6, 7});
  const std::vector<std::byte> branches = ReadBytes(dir + "/branches.safetensors");

  // Negative token ids (valid: any int is a token).
  {
    ringkv::LayerCaches c = ringkv::fuzz::FuzzCaches();
    ringkv::PromptCache p(c, ringkv::fuzz::FuzzOptions());
    Serve(p, c, {-200, 4, -1});
    p.Save(dir + "/negative_tokens.safetensors");
  }
  // Many root nodes and a deep chain (valid; loading is linear, iterative).
  {
    ringkv::LayerCaches c = ringkv::fuzz::FuzzCaches();
    ringkv::PromptCache p(c, ringkv::fuzz::FuzzOptions());
    Serve(p, c, {7});
    p.Save(dir + "/one_token.safetensors");
    const std::vector<std::byte> one = ReadBytes(dir + "/one_token.safetensors");
    WriteBytes(dir + "/many_roots.safetensors", OneTokenNodes(one, 64, false));
    WriteBytes(dir + "/deep_chain.safetensors", OneTokenNodes(one, 64, true));
  }
  // Refused: a nested array in a shape (the depth is bounded before parsing).
  {
    const std::uint64_t n = CraftedFile::LengthField(branches);
    std::string header(reinterpret_cast<const char*>(branches.data() + 8), n);
    const std::size_t at = header.find("\"shape\":[");
    header.replace(at + 8, header.find(']', at) - at - 7,
                   "[1,1," + std::string(40, '[') + std::string(40, ']') + ",2]");
    const std::vector<std::byte> data(branches.begin() + static_cast<std::ptrdiff_t>(8 + n),
                                      branches.end());
    WriteBytes(dir + "/nested_shape.safetensors", CraftedFile::Assemble(header, data));
  }
  // Refused: two tensors naming the same bytes, and bytes no tensor names.
  {
    CraftedFile f = CraftedFile::Parse(branches);
    f.header["n1.l1.keys"]["data_offsets"] = f.header["n1.l1.values"]["data_offsets"];
    f.RecomputeTensorChecksums();
    WriteBytes(dir + "/overlapping_tensors.safetensors", f.Bytes());
  }
  {
    CraftedFile f = CraftedFile::Parse(branches);
    const auto size = static_cast<std::uint64_t>(f.data.size());
    const auto b = f.header["n0.l1.keys"]["data_offsets"][0].get<std::uint64_t>();
    const auto e = f.header["n0.l1.keys"]["data_offsets"][1].get<std::uint64_t>();
    f.data.insert(f.data.end(), f.data.begin() + static_cast<std::ptrdiff_t>(b),
                  f.data.begin() + static_cast<std::ptrdiff_t>(e));
    f.header["n0.l1.keys"]["data_offsets"] = {size, size + (e - b)};
    f.RecomputeTensorChecksums();
    WriteBytes(dir + "/uncovered_bytes.safetensors", f.Bytes());
  }
  // Refused: K/V of another layout than the caches hold (two heads).
  {
    CraftedFile f = CraftedFile::Parse(ReadBytes(dir + "/short.safetensors"));
    for (json& layer : f.model["layers"]) {
      if (!layer["kv"].is_null()) layer["kv"]["heads"] = 2;
    }
    WriteBytes(dir + "/other_layout.safetensors", f.Bytes());
  }
  // Caches files: empty, an unwrapped ring, a ring wrapped by decode steps and
  // one holding a prefill chunk past its window, with tokens and metadata.
  {
    ringkv::LayerCaches c = ringkv::fuzz::FuzzCaches();
    ringkv::SaveCaches(dir + "/caches_empty.safetensors", c);
    ringkv::fuzz::Feed(c, std::vector<int>{1, 2, 3});
    ringkv::SaveCaches(dir + "/caches_short.safetensors", c, std::vector<int>{1, 2, 3},
                       {{"model", "ringkv-fuzz"}});
    for (int t = 4; t <= 7; ++t) ringkv::fuzz::Feed(c, std::vector<int>{t});
    ringkv::SaveCaches(dir + "/caches_wrapped.safetensors", c, std::vector<int>{-200, 5});
    ringkv::fuzz::Feed(c, std::vector<int>{8, 9, 10, 11, 12});
    ringkv::SaveCaches(dir + "/caches_prefill.safetensors", c);
  }
  // Quantized layers (stored rows as U8 tensors, docs/cache_file.md): int8 K/V
  // of the fuzz model in a wrapped ring, int8 keys with int4 values (rows of 32
  // values), int4h K/V (rows of 64, rotated in one block) and an int8 prompt cache.
  {
    ringkv::LayerCaches c = ringkv::fuzz::FuzzCaches(ringkv::KvStorage::Same(ringkv::DType::kI8));
    ringkv::fuzz::Feed(c, std::vector<int>{1, 2, 3});
    for (int t = 4; t <= 7; ++t) ringkv::fuzz::Feed(c, std::vector<int>{t});
    ringkv::SaveCaches(dir + "/caches_int8_wrapped.safetensors", c, std::vector<int>{1, 2});
    ringkv::LayerCaches mixed =
        ringkv::fuzz::FuzzCaches(ringkv::KvStorage{ringkv::DType::kI8, ringkv::DType::kI4});
    ringkv::fuzz::Feed(mixed, std::vector<int>{1, 2, 3, 4, 5}, 32);
    ringkv::SaveCaches(dir + "/caches_int8_int4.safetensors", mixed);
    ringkv::LayerCaches rotated =
        ringkv::fuzz::FuzzCaches(ringkv::KvStorage::Same(ringkv::DType::kI4H));
    ringkv::fuzz::Feed(rotated, std::vector<int>{1, 2, 3, 4, 5, 6}, 64);
    ringkv::SaveCaches(dir + "/caches_int4h.safetensors", rotated);
    ringkv::LayerCaches p_caches =
        ringkv::fuzz::FuzzCaches(ringkv::KvStorage::Same(ringkv::DType::kI8));
    ringkv::PromptCache p(p_caches, ringkv::fuzz::FuzzOptions());
    Serve(p, p_caches, {1, 2, 3, 4, 5, 6});
    Serve(p, p_caches, {1, 2, 3, 9});
    p.Save(dir + "/prompt_int8.safetensors");
  }
  // Sequence files: a short sequence and one that has slid past the window.
  {
    ringkv::CausalCache sliding(ringkv::fuzz::FuzzSequenceOptions(2, 8));
    ringkv::CausalCache global(ringkv::fuzz::FuzzSequenceOptions(1, 0));
    ringkv::CausalCache* pool[] = {&sliding, &global};
    const ringkv::CausalCache* const saved[] = {&sliding, &global};
    ringkv::fuzz::FeedSequence(pool, 0, 0, 3);
    ringkv::SaveSequence(dir + "/sequence_short.safetensors", saved, 0, std::vector<int>{1, 2, 3},
                         {{"model", "ringkv-fuzz"}});
    ringkv::fuzz::FeedSequence(pool, 0, 3, 20);
    ringkv::SaveSequence(dir + "/sequence_slid.safetensors", saved, 0);
  }
  std::printf("seeds written to %s\n", dir.c_str());
  return 0;
}
