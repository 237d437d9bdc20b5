#pragma once
// The one exception type ringkv throws for bad user input. Messages start with
// the function in brackets and name the argument and the values, e.g.
//   [Tensor::Slice] end 9 exceeds dim 2 of size 8

#include <stdexcept>
#include <string>

namespace ringkv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Thrown for shape, rank and dtype mismatches.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// Thrown when a snapshot or a snapshot file cannot be used.
class SnapshotError : public Error {
 public:
  using Error::Error;
};

}  // namespace ringkv
