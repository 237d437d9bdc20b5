#include "temp_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

namespace ringkv::detail {
namespace {

constexpr std::time_t kGoneAge = 10 * 60;   // a dead saver's leftovers
constexpr std::time_t kAnyAge = 24 * 3600;  // anyone's: no save takes a day

bool Digits(const std::string& s, std::size_t begin, std::size_t end) {
  if (begin >= end) return false;
  for (std::size_t i = begin; i < end; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

bool ProcessGone(long pid) { return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

}  // namespace

std::string TempName(const std::string& name, long pid, std::uint32_t random) {
  const std::string suffix = fmt::format(".tmp.{}.{:08x}", pid, random);
  const std::size_t room = NAME_MAX > suffix.size() ? NAME_MAX - suffix.size() : 0;
  return name.substr(0, room) + suffix;
}

bool IsTempName(const std::string& name, long* pid) {
  // <prefix>.tmp.<digits>.<8 lowercase hex digits>
  if (name.size() < 16) return false;
  const std::size_t hex = name.size() - 8;
  for (std::size_t i = hex; i < name.size(); ++i) {
    const char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  if (name[hex - 1] != '.') return false;
  const std::size_t tmp = name.rfind(".tmp.", hex - 1);
  if (tmp == std::string::npos || tmp == 0) return false;
  const std::size_t digits = tmp + 5;
  if (!Digits(name, digits, hex - 1) || hex - 1 - digits > 9) return false;
  *pid = std::stol(name.substr(digits, hex - 1 - digits));
  return *pid > 0;
}

void RemoveStaleTemps(const std::string& directory) noexcept {
  DIR* dir = ::opendir(directory.empty() ? "." : directory.c_str());
  if (dir == nullptr) return;
  const std::time_t now = std::time(nullptr);
  while (const dirent* entry = ::readdir(dir)) {
    try {
      const std::string name = entry->d_name;
      long pid = 0;
      if (!IsTempName(name, &pid)) continue;
      struct stat st {};
      if (::fstatat(::dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (!S_ISREG(st.st_mode)) continue;
      const std::time_t age = now - st.st_mtime;
      if (age >= kAnyAge || (age >= kGoneAge && ProcessGone(pid))) {
        ::unlinkat(::dirfd(dir), entry->d_name, 0);
      }
    } catch (...) {
      // Allocation failed: leave the rest for the next save.
    }
  }
  ::closedir(dir);
}

}  // namespace ringkv::detail
