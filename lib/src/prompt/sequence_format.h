#pragma once
// The sequence file (SaveSequence / LoadSequence): the safetensors frame of
// file_frame.h with "__metadata__" holding
//   format "ringkv.sequence", version, the JSON texts "caches" (per cache its
//   layout and the sequence's stored positions as runs [begin, end)), "tokens"
//   and "checksums", the caller's metadata as "user.<key>", and
//   "metadata_checksum" over all of those entries (EntriesChecksum).
// Tensors "c<cache>.l<layer>.keys" [1, Hkv, n, D] and ".values" [1, Hkv, n, Dv],
// token i of the cache's n at its i-th stored position.

#include <cstddef>
#include <string>
#include <string_view>

namespace ringkv::detail {

inline constexpr int kSequenceVersion = 1;
// The largest header LoadSequence parses and SaveSequence writes (a parsed
// header takes up to ~20 times its size, see prompt_file.h).
inline constexpr std::size_t kSequenceHeaderLimit = std::size_t{16} << 20;
inline constexpr std::string_view kSequenceOwnKeys[] = {"format", "version",   "caches",
                                                        "tokens", "checksums", "metadata_checksum"};

inline std::string SequenceTensorName(std::size_t cache, int layer, std::string_view kind) {
  return "c" + std::to_string(cache) + ".l" + std::to_string(layer) + "." + std::string(kind);
}

}  // namespace ringkv::detail
