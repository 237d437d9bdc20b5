#pragma once
// A strided view of rank 0-4 over shared storage: 64-byte-aligned bytes that
// ringkv allocates, or a caller's buffer (Borrow).
//
// Copying a Tensor is cheap and shares the storage (a view, like a span with
// shared ownership); Slice(), Permute(), Transpose() and Unsqueeze() are views
// too. A deep copy is the named Clone(). Writes through one view (SliceUpdate)
// are seen by every view of the same storage: that is what lets a cache hand
// out views of its buffers.
//
// Borrow() wraps a caller's buffer without copying it: the tensor and its views
// do not own those bytes, and the caller keeps them alive (and unchanged by
// others while ringkv reads them) for as long as any of them is used.

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "ringkv/dtype.h"
#include "ringkv/shape.h"

namespace ringkv {

// Owned, 64-byte-aligned bytes, or bytes borrowed from a caller (Tensor::Borrow).
class Storage {
 public:
  enum class Init : std::uint8_t { kZero, kUninitialized };

  // kUninitialized is for buffers that are written in full before they are read:
  // zeroing a fresh 1 MiB cache block cost more than the token writes into it.
  // Throws ringkv::Error when the bytes cannot be allocated.
  explicit Storage(std::size_t bytes, Init init = Init::kZero);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  std::byte* Data() noexcept { return data_; }
  const std::byte* Data() const noexcept { return data_; }
  std::size_t Bytes() const noexcept { return bytes_; }
  // False for bytes borrowed through a const pointer.
  bool Writable() const noexcept { return writable_; }

 private:
  friend class Tensor;
  // Borrowed: ~Storage leaves the bytes alone.
  Storage(std::byte* data, std::size_t bytes, bool writable) noexcept;

  std::byte* data_;
  std::size_t bytes_;
  bool owned_ = true;
  bool writable_ = true;
};

class Tensor {
 public:
  Tensor() = default;  // empty: rank 0, no storage, NumElements() == 0

  // The allocating factories (and AsType, Clone, Contiguous) throw ringkv::Error
  // for a dtype outside the enum, a byte count above 2^63 - 1, or an allocation
  // that fails; the message names the shape and the bytes.
  static Tensor Zeros(DType dtype, const Shape& shape);
  // Contiguous, with unspecified contents: for buffers the caller overwrites in
  // full before reading (copies, cache blocks).
  static Tensor Uninitialized(DType dtype, const Shape& shape);
  // Throws ringkv::Error when values.size() != shape.NumElements(). Rounds to
  // nearest even when dtype is f16 or bf16.
  static Tensor FromVector(std::span<const float> values, const Shape& shape,
                           DType dtype = DType::kF32);

  // A view of the caller's elements at `data`, no copy: element (i0, i1, ...) is
  // at data + (i0 * strides[0] + i1 * strides[1] + ...) * SizeOf(dtype). strides
  // are in elements, one per axis, >= 0; empty means row-major contiguous. The
  // caller keeps the bytes alive while the tensor or any view of it is used.
  // Throws ringkv::Error (naming the argument and values) for a dtype outside the
  // enum, null data with elements, data not aligned to SizeOf(dtype), a strides
  // count != rank, a negative stride, or a span past 2^63 - 1 bytes or the end of
  // the address space. A writable borrow must give each element its own address
  // (so no zero stride on a dim > 1); a read-only one (const data) may overlap,
  // e.g. broadcast with a zero stride, and every ringkv call that would write
  // into it (SliceUpdate, MutableData) throws ringkv::Error instead.
  static Tensor Borrow(void* data, DType dtype, const Shape& shape,
                       std::span<const std::int64_t> strides = {});
  static Tensor Borrow(const void* data, DType dtype, const Shape& shape,
                       std::span<const std::int64_t> strides = {});

  bool Empty() const noexcept { return storage_ == nullptr; }
  DType Dtype() const noexcept { return dtype_; }
  const Shape& GetShape() const noexcept { return shape_; }
  int Rank() const noexcept { return shape_.Rank(); }
  std::int64_t Dim(int axis) const { return shape_.Dim(axis); }
  std::int64_t Stride(int axis) const;                      // in elements
  std::int64_t Offset() const noexcept { return offset_; }  // in elements, into Storage
  // 0 for an empty tensor; 1 for a rank-0 (scalar) tensor with storage.
  std::int64_t NumElements() const noexcept { return Empty() ? 0 : shape_.NumElements(); }
  std::size_t NumBytes() const noexcept;  // of the elements in view, not the storage
  bool IsContiguous() const noexcept;     // row-major with no gaps
  bool SharesStorageWith(const Tensor& other) const noexcept {
    return storage_ != nullptr && storage_ == other.storage_;
  }
  // Whether ringkv may write through this tensor: false when empty or borrowed
  // read-only (Borrow(const void*, ...)).
  bool IsWritable() const noexcept { return storage_ != nullptr && storage_->Writable(); }

  // Pointer to the first element of the view.
  const void* Data() const noexcept;
  // Throws ringkv::Error when the tensor is not empty and not IsWritable().
  void* MutableData();

  // View of [begin, end) along axis; no copy. Throws ringkv::Error on a bad axis or range.
  Tensor Slice(int axis, std::int64_t begin, std::int64_t end) const;
  // Same storage with a new shape; requires a contiguous tensor with equal element count.
  Tensor Reshape(const Shape& shape) const;
  // Views with the axes reordered, no copy: result dim i is this tensor's dim
  // axes[i]. `axes` is a permutation of [0, Rank()), else ringkv::Error naming it.
  Tensor Permute(std::initializer_list<int> axes) const;
  Tensor Permute(std::span<const int> axes) const;
  // Swaps axes a and b (each in [0, Rank())).
  Tensor Transpose(int a, int b) const;
  // Inserts a size-1 axis before `axis` (in [0, Rank()], with Rank() < 4).
  Tensor Unsqueeze(int axis) const;

  // This view if already contiguous, else a contiguous copy.
  Tensor Contiguous() const;
  // Always a fresh contiguous copy.
  Tensor Clone() const;
  // A fresh contiguous copy in `dtype` (vectorised conversion).
  Tensor AsType(DType dtype) const;

  // Elements in row-major order, converted to float.
  std::vector<float> ToVector() const;

 private:
  static Tensor Allocate(const char* function, DType dtype, const Shape& shape, Storage::Init init);
  static Tensor BorrowBytes(std::byte* data, bool writable, DType dtype, const Shape& shape,
                            std::span<const std::int64_t> strides);

  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::array<std::int64_t, Shape::kMaxRank> strides_{};
  std::int64_t offset_ = 0;
};

}  // namespace ringkv
