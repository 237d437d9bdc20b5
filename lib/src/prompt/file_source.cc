#include "file_source.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <gsl/assert>

#include "ringkv/error.h"

namespace ringkv::detail {
namespace {

const char* Kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

}  // namespace

void MemorySource::Read(std::uint64_t offset, std::span<std::byte> out) const {
  Expects(offset <= bytes_.size() && out.size() <= bytes_.size() - offset);
  std::memcpy(out.data(), bytes_.data() + offset, out.size());
}

FileSource::FileSource(const std::string& path, const char* function)
    : path_(path), function_(function) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    throw SnapshotError(
        fmt::format("[{}] cannot open '{}': {}", function, path, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int error = errno;
    ::close(fd_);
    throw SnapshotError(
        fmt::format("[{}] cannot stat '{}': {}", function, path, std::strerror(error)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw SnapshotError(
        fmt::format("[{}] '{}' is not a regular file ({})", function, path, Kind(st.st_mode)));
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

void FileSource::Read(std::uint64_t offset, std::span<std::byte> out) const {
  Expects(offset <= size_ && out.size() <= size_ - offset);
  while (!out.empty()) {
    const ssize_t n = ::pread(fd_, out.data(), out.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw SnapshotError(
          fmt::format("[{}] cannot read '{}': {}", function_, path_, std::strerror(errno)));
    }
    if (n == 0) {
      throw SnapshotError(fmt::format(
          "[{}] '{}' ended at byte {} of the {} it had when opened (it changed while loading)",
          function_, path_, offset, size_));
    }
    offset += static_cast<std::uint64_t>(n);
    out = out.subspan(static_cast<std::size_t>(n));
  }
}

}  // namespace ringkv::detail
