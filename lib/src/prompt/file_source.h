#pragma once
// The bytes of a prompt cache file, read on demand: the loader reads the header,
// then each tensor once, so loading holds one tensor at a time, never the file.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ringkv::detail {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual std::uint64_t Size() const noexcept = 0;
  // Copies bytes [offset, offset + out.size()) (within Size()) into out. Throws
  // ringkv::SnapshotError when they cannot be read (e.g. the file shrank).
  virtual void Read(std::uint64_t offset, std::span<std::byte> out) const = 0;

 protected:
  ByteSource() = default;
  ByteSource(const ByteSource&) = default;
  ByteSource& operator=(const ByteSource&) = default;
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::span<const std::byte> bytes) noexcept : bytes_(bytes) {}
  std::uint64_t Size() const noexcept override { return bytes_.size(); }
  void Read(std::uint64_t offset, std::span<std::byte> out) const override;

 private:
  std::span<const std::byte> bytes_;
};

// A regular file (symlinks followed). Opening never blocks (O_NONBLOCK, so a
// FIFO cannot stall it) and refuses anything but a regular file (a FIFO, a
// device such as /dev/zero, a directory) with ringkv::SnapshotError.
class FileSource final : public ByteSource {
 public:
  FileSource(const std::string& path, const char* function);
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  std::uint64_t Size() const noexcept override { return size_; }
  void Read(std::uint64_t offset, std::span<std::byte> out) const override;

 private:
  std::string path_;
  const char* function_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

}  // namespace ringkv::detail
