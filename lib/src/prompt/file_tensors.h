#pragma once
// The tensor entries of a ringkv file's header (safetensors: name -> dtype,
// shape, data_offsets) and their checksums. Written in data order; read back
// checked before any byte of data is read or any buffer allocated: shapes
// against byte ranges, ranges against the data section, which they must tile
// exactly (every byte in one tensor: no overlap, so no aliasing, and no gap).
// Each tensor's bytes are checked against its checksum as they are read.
//
// Besides safetensors' float dtypes, a tensor may be "U8": the stored rows of a
// quantized K or V (dtype.h), [1, Hkv, slots, RowBytes(dtype, dim)] bytes that
// no ringkv Tensor can hold (file_layer.h names their dtype and scale layout).

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "file_source.h"
#include "json_fields.h"
#include "ringkv/tensor.h"

namespace ringkv::detail {

struct TensorEntry {
  DType dtype = DType::kF32;  // when !u8
  bool u8 = false;            // "U8": bytes, the shape's last dim counting them
  std::array<std::int64_t, 4> shape{};
  std::uint64_t begin = 0;  // in the data section
  std::uint64_t end = 0;
  std::uint64_t checksum = 0;  // XXH3_64bits of the bytes, as the header states
  bool used = false;           // named by a node layer (each exactly once)

  std::uint64_t Bytes() const noexcept { return end - begin; }
};

using TensorTable = std::map<std::string, TensorEntry>;

// For messages: "f32", "f16", "bf16" (DTypeName) or "U8".
std::string_view EntryDTypeName(const TensorEntry& e) noexcept;

// One tensor's bytes as written: a contiguous Tensor, or (U8) a byte buffer.
struct TensorBytes {
  Tensor tensor;                 // empty for U8
  std::vector<std::byte> bytes;  // U8 only

  std::span<const std::byte> Bytes() const noexcept;
};

// Lays tensors out back to back: their header entries, checksums and data order.
struct TensorWriter {
  json entries = json::object();     // name -> {dtype, shape, data_offsets}
  json checksums = json::object();   // name -> XXH3_64bits of the bytes, 16 hex digits
  std::vector<TensorBytes> tensors;  // in data order, each contiguous [d0, d1, d2, d3]
  std::uint64_t bytes = 0;           // the data section so far

  void Add(const std::string& name, const Tensor& tensor);
  // A U8 tensor of `shape` (bytes.size() == the product of its dims).
  void AddBytes(const std::string& name, const std::array<std::int64_t, 4>& shape,
                std::vector<std::byte> bytes);
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
// A float tensor only (!u8).
Tensor ReadTensor(const ByteSource& source, std::uint64_t data_offset,
                  const TensorTable::value_type& tensor);
// A U8 tensor's bytes, checked the same way.
std::vector<std::byte> ReadBytes(const ByteSource& source, std::uint64_t data_offset,
                                 const TensorTable::value_type& tensor);
// Only the checksum, reading in bounded chunks (nothing the size of the tensor).
// `rows`, when set, sees every chunk as it is read: whole rows of the last dim
// (U8: whole stored rows), from row `first_row` of the tensor's rows.
using RowVisitor = std::function<void(std::int64_t first_row, std::span<const std::byte> rows)>;
void VerifyTensor(const ByteSource& source, std::uint64_t data_offset,
                  const TensorTable::value_type& tensor, const RowVisitor& rows = {});

}  // namespace ringkv::detail
