// Runs ringkv_demo with flags it must refuse and checks how it fails: the given
// exit code (not a crash, not an abort from an uncaught exception) and exactly
// one line on stderr that contains every expected piece (the flag and its value).
// Usage: ringkv_demo_error_check <exit code> <expected piece>... -- <ringkv_demo> [flags...]
// Exit 0 = the demo failed as expected.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

int main(int argc, char** argv) {
  int i = 1;
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: ringkv_demo_error_check <exit code> <piece>... -- <demo> [flags]\n");
    return 2;
  }
  const int expected_code = std::atoi(argv[i++]);
  std::vector<std::string> pieces;
  for (; i < argc && std::string_view(argv[i]) != "--"; ++i) pieces.emplace_back(argv[i]);
  if (i + 1 >= argc) {
    std::fprintf(stderr, "usage: missing -- <demo>\n");
    return 2;
  }
  // stderr into the pipe, stdout discarded: the message must be on stderr.
  std::string command;
  for (++i; i < argc; ++i) command += std::string("'") + argv[i] + "' ";
  command += "--no-progress 2>&1 >/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return 2;
  std::string err;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) err.append(buffer, n);
  const int status = pclose(pipe);
  std::fprintf(stderr, "stderr: %s", err.c_str());

  int failures = 0;
  if (status == -1 || !WIFEXITED(status)) {
    std::fprintf(stderr, "FAIL: the demo did not exit normally (status %d)\n", status);
    ++failures;
  } else if (WEXITSTATUS(status) != expected_code) {
    std::fprintf(stderr, "FAIL: exit code %d, expected %d\n", WEXITSTATUS(status), expected_code);
    ++failures;
  }
  if (err.empty() || err.back() != '\n' || std::count(err.begin(), err.end(), '\n') != 1) {
    std::fprintf(stderr, "FAIL: expected exactly one line on stderr\n");
    ++failures;
  }
  for (const std::string& piece : pieces) {
    if (err.find(piece) == std::string::npos) {
      std::fprintf(stderr, "FAIL: the message does not contain \"%s\"\n", piece.c_str());
      ++failures;
    }
  }
  if (failures == 0) std::fprintf(stderr, "failed as expected\n");
  return failures == 0 ? 0 : 1;
}
