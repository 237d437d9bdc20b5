#pragma once
// The tensor entries of a ringkv file's header (safetensors: name -> dtype,
// shape, data_offsets) and their checksums. Written in data order; read back
// checked before any byte of data is read or any buffer allocated: shapes
// against byte ranges, ranges against the data section, which they must tile
// exactly (every byte in one tensor: no overlap, so no aliasing, and no gap).
// Each tensor's bytes are checked against its checksum as they are read.

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "file_source.h"
#include "json_fields.h"
#include "ringkv/tensor.h"

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

// Lays tensors out back to back: their header entries, checksums and data order.
struct TensorWriter {
  json entries = json::object();    // name -> {dtype, shape, data_offsets}
  json checksums = json::object();  // name -> XXH3_64bits of the bytes, 16 hex digits
  std::vector<Tensor> tensors;      // in data order, each contiguous [d0, d1, d2, d3]
  std::uint64_t bytes = 0;          // the data section so far

  void Add(const std::string& name, const Tensor& tensor);
};

// Every header key but "__metadata__".
TensorTable ParseTensors(const json& header, std::uint64_t data_size);
// Each tensor's checksum from the "checksums" object (name -> 16 hex digits).
void AttachChecksums(TensorTable& tensors, const json& checksums);
// Each tensor named exactly once (TensorEntry::used), else the first unused is named.
void CheckAllUsed(const TensorTable& tensors, std::string_view owner);

// The tensor's bytes (data section at `data_offset` of `source`), checked
// against its checksum. Its size was checked against the data section (and so
// the file) before anything is allocated.
Tensor ReadTensor(const ByteSource& source, std::uint64_t data_offset,
                  const TensorTable::value_type& tensor);
// Only the checksum, reading in bounded chunks (nothing the size of the tensor).
void VerifyTensor(const ByteSource& source, std::uint64_t data_offset,
                  const TensorTable::value_type& tensor);

}  // namespace ringkv::detail
