// Save and Load of the chat workload's trie against a plain write + fsync and a
// plain read of a file of the same size, measured in the same run and directory.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "chat_workload.h"

namespace ringkv::bench {
namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Write + fsync of `bytes` (the save's baseline); read back (the load's).
std::pair<double, double> DiskRates(const std::string& path, std::size_t bytes) {
  std::vector<char> data(bytes, 7);
  auto t0 = std::chrono::steady_clock::now();
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd, data.data() + done, bytes - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  const double write_s = Seconds(t0);
  t0 = std::chrono::steady_clock::now();
  const int rfd = ::open(path.c_str(), O_RDONLY);
  done = 0;
  for (;;) {
    const ssize_t n = ::read(rfd, data.data(), bytes);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(rfd);
  const double read_s = Seconds(t0);
  std::filesystem::remove(path);
  return {static_cast<double>(bytes) / write_s, static_cast<double>(bytes) / read_s};
}

void BM_SaveLoad(benchmark::State& state) {
  const ChatShape shape;
  LayerCaches caches = LayerCaches::Interleaved(shape.layers, shape.global_every, shape.window);
  PromptCache cache(caches, ChatOptions(std::size_t{1} << 40));
  RunChat(shape, cache, caches);
  // A fresh directory: concurrent runs must not share a file.
  std::string dir =
      (std::filesystem::temp_directory_path() / "ringkv_prompt_bench_XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) {
    state.SkipWithError("mkdtemp failed");
    return;
  }
  const std::string path = dir + "/cache.safetensors";
  double save_s = 0, load_s = 0;
  LayerCaches other = LayerCaches::Interleaved(shape.layers, shape.global_every, shape.window);
  PromptCache loaded(other, ChatOptions(std::size_t{1} << 40));
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    cache.Save(path);
    save_s = Seconds(t0);
    t0 = std::chrono::steady_clock::now();
    loaded.Load(path);
    load_s = Seconds(t0);
  }
  const auto file_bytes = static_cast<std::size_t>(std::filesystem::file_size(path));
  std::filesystem::remove(path);
  const auto [write_rate, read_rate] = DiskRates(path + ".raw", file_bytes);
  const double save_rate = static_cast<double>(file_bytes) / save_s;
  const double load_rate = static_cast<double>(file_bytes) / load_s;
  state.counters["file_MiB"] = static_cast<double>(file_bytes) / (1 << 20);
  state.counters["save_GBps"] = save_rate / 1e9;
  state.counters["write_fsync_GBps"] = write_rate / 1e9;
  state.counters["save_vs_write"] = save_rate / write_rate;
  state.counters["load_GBps"] = load_rate / 1e9;
  state.counters["read_GBps"] = read_rate / 1e9;
  state.counters["load_vs_read"] = load_rate / read_rate;
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_SaveLoad)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ringkv::bench
