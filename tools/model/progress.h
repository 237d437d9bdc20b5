#pragma once
// A progress line on stderr for anything that runs longer than a couple of
// seconds: silent for the first 1.5 s, then at most five updates a second
// ("\r" redraws on a terminal, one line every 2 s otherwise), and a final line.

#include <chrono>
#include <cstdint>
#include <string>

namespace ringkv::model {

class Progress {
 public:
  Progress(std::string label, std::int64_t total, bool enabled = true);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Update(std::int64_t done);

 private:
  using Clock = std::chrono::steady_clock;
  void Print(std::int64_t done, bool final);

  std::string label_;
  std::int64_t total_;
  bool enabled_;
  bool tty_;
  bool shown_ = false;
  std::int64_t done_ = 0;
  Clock::time_point start_;
  Clock::time_point last_;
};

}  // namespace ringkv::model
