#include "progress.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

namespace ringkv::model {

Progress::Progress(std::string label, std::int64_t total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(Clock::now()),
      last_(start_) {}

Progress::~Progress() {
  if (shown_) Print(done_, true);
}

void Progress::Update(std::int64_t done) {
  done_ = done;
  if (!enabled_) return;
  const auto now = Clock::now();
  const double since_start = std::chrono::duration<double>(now - start_).count();
  const double since_last = std::chrono::duration<double>(now - last_).count();
  if (since_start < 1.5 || since_last < (tty_ ? 0.2 : 2.0)) return;
  last_ = now;
  shown_ = true;
  Print(done, false);
}

void Progress::Print(std::int64_t done, bool final) {
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  std::fprintf(stderr, "%s[%s] %lld/%lld (%.1f s)%s", tty_ ? "\r" : "", label_.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), seconds,
               final || !tty_ ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace ringkv::model
