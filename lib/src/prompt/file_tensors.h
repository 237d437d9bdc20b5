#pragma once
// The tensor entries of a prompt cache file's header (safetensors: name ->
// dtype, shape, data_offsets) and their checksums, checked before any byte of
// data is read or any buffer allocated: shapes against byte ranges, ranges
// against the data section, which they must tile exactly (every byte in one
// tensor: no overlap, so no aliasing, and no gap).

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "json_fields.h"

namespace ringkv::detail {

struct TensorEntry {
  DType dtype = DType::kF32;
  std::array<std::int64_t, 4> shape{};
  std::uint64_t begin = 0;  // in the data section
  std::uint64_t end = 0;
  std::uint64_t checksum = 0;  // XXH3_64bits of the bytes, as the header states
  bool used = false;           // named by a node layer (each exactly once)

  std::uint64_t Bytes() const noexcept { return end - begin; }
};

using TensorTable = std::map<std::string, TensorEntry>;

// Every header key but "__metadata__".
TensorTable ParseTensors(const json& header, std::uint64_t data_size);
// Each tensor's checksum from the "checksums" object (name -> 16 hex digits).
void AttachChecksums(TensorTable& tensors, const json& checksums);

}  // namespace ringkv::detail
