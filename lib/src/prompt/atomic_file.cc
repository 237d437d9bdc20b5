#include "atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <utility>

#include "ringkv/error.h"
#include "temp_files.h"

namespace ringkv::detail {
namespace {

[[noreturn]] void Fail(const char* function, const char* step, const std::string& path) {
  throw Error(fmt::format("[{}] {} '{}': {}", function, step, path, std::strerror(errno)));
}

void WriteAll(int fd, std::span<const std::byte> bytes, const char* function,
              const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) Fail(function, "cannot write", path);
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
}

// Closes and unlinks the temporary file unless released.
class TempFile {
 public:
  TempFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  int Fd() const noexcept { return fd_; }
  const std::string& Path() const noexcept { return path_; }
  int ReleaseFd() noexcept { return std::exchange(fd_, -1); }
  void Renamed() noexcept { path_.clear(); }

 private:
  int fd_;
  std::string path_;
};

}  // namespace

void WriteFileAtomically(const std::string& path, std::span<const std::span<const std::byte>> parts,
                         const char* function) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.parent_path();
  RemoveStaleTemps(dir.string());
  // Same directory, so the rename is atomic. Not mkstemp: its files are 0600,
  // while a saved cache gets the mode of the file it replaces, or the usual
  // 0666 & ~umask.
  std::random_device random;
  std::string temp_path;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    temp_path = (dir / TempName(target.filename().string(), ::getpid(), random())).string();
    fd = ::open(temp_path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) Fail(function, "cannot create a temporary file next to", path);
  TempFile temp(fd, temp_path);
  struct stat replaced {};
  if (::stat(path.c_str(), &replaced) == 0 && S_ISREG(replaced.st_mode) &&
      ::fchmod(temp.Fd(), replaced.st_mode & 0777) != 0) {
    Fail(function, "cannot set the mode of", temp.Path());
  }
  for (std::span<const std::byte> part : parts) WriteAll(temp.Fd(), part, function, temp.Path());
  if (::fsync(temp.Fd()) != 0) Fail(function, "cannot fsync", temp.Path());
  if (::close(temp.ReleaseFd()) != 0) Fail(function, "cannot close", temp.Path());
  if (::rename(temp.Path().c_str(), path.c_str()) != 0) Fail(function, "cannot rename onto", path);
  temp.Renamed();
  // Make the rename itself durable.
  const int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace ringkv::detail
