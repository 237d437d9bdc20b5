#pragma once
// A shape of rank 0 to 4. ringkv's axis convention is [B, H, L, D]: batch, heads,
// sequence, head dim.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace ringkv {

class Shape {
 public:
  static constexpr int kMaxRank = 4;

  Shape() = default;
  // Throws ringkv::Error for a rank above 4 or a negative dim.
  Shape(std::initializer_list<std::int64_t> dims);

  int Rank() const noexcept { return rank_; }
  // Throws ringkv::Error when axis is outside [0, Rank()).
  std::int64_t Dim(int axis) const;
  std::int64_t operator[](int axis) const { return Dim(axis); }
  std::int64_t NumElements() const noexcept;
  const std::array<std::int64_t, kMaxRank>& Dims() const noexcept { return dims_; }

  // A copy with `axis` set to `size`.
  Shape With(int axis, std::int64_t size) const;

  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    return a.rank_ == b.rank_ && a.dims_ == b.dims_;
  }

 private:
  std::array<std::int64_t, kMaxRank> dims_{};  // unused trailing dims are 0
  int rank_ = 0;
};

std::string ToString(const Shape& shape);  // "[1, 8, 256, 128]"

}  // namespace ringkv
