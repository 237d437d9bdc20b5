// Runs ringkv_kv_accuracy (the tool behind docs/quantized_kv.md's accuracy
// tables) at a small size and checks what its tables must show whatever the
// data: every storage is reported, each error is finite and non-zero (a dtype
// that rounds cannot match f32 exactly), and the errors rank by precision:
// f16 (11 significant bits) below bf16 (8) below int8 (7 bits over a row's
// largest value) below any storage with 4-bit values. Also checks that a bad
// flag is refused with one line naming it.
// Usage: ringkv_kv_accuracy_check <ringkv_kv_accuracy>. Exit 0: all hold.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Run {
  int exit_code = -1;  // -1: did not exit normally
  std::string out;
};

Run Execute(const std::string& command) {
  Run run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) {
    run.out.append(buffer, n);
  }
  const int status = pclose(pipe);
  if (status != -1 && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
}

// The tool pads its columns with two or more spaces; single spaces sit inside
// cells ("int8 K + int4 V", "random N(0, 1)").
std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  std::size_t spaces = 0;
  for (const char ch : line + "  ") {
    if (ch == ' ') {
      ++spaces;
      continue;
    }
    if (spaces >= 2 && !cell.empty()) {
      cells.push_back(cell);
      cell.clear();
    } else if (spaces == 1 && !cell.empty()) {
      cell += ' ';
    }
    spaces = 0;
    cell += ch;
  }
  if (!cell.empty()) cells.push_back(cell);
  return cells;
}

bool ParseNumber(const std::string& text, double& value) {
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0';
}

struct Errors {
  double max = 0;
  double mean = 0;
};

// Counts and prints the checks that fail.
struct Report {
  int failures = 0;
  void Fail(const std::string& what) {
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    ++failures;
  }
};

void CheckErrors(Report& r, const std::string& where, const Errors& e) {
  if (!std::isfinite(e.max) || !std::isfinite(e.mean) || e.mean <= 0 || e.mean > e.max) {
    r.Fail(where + ": errors must be finite with 0 < mean <= max, got max " +
           std::to_string(e.max) + " mean " + std::to_string(e.mean));
  }
}

// Each name's mean error must exceed the previous one's.
void CheckRanking(Report& r, const std::string& where, const std::map<std::string, Errors>& rows,
                  const std::vector<std::vector<std::string>>& ranks) {
  for (std::size_t i = 1; i < ranks.size(); ++i) {
    for (const std::string& lower : ranks[i - 1]) {
      for (const std::string& higher : ranks[i]) {
        const auto lo = rows.find(lower);
        const auto hi = rows.find(higher);
        if (lo == rows.end() || hi == rows.end()) continue;  // reported missing already
        if (!(lo->second.mean < hi->second.mean)) {
          r.Fail(where + ": mean error of " + lower + " (" + std::to_string(lo->second.mean) +
                 ") is not below " + higher + " (" + std::to_string(hi->second.mean) + ")");
        }
      }
    }
  }
}

void CheckAttention(Report& r, const std::string& tool) {
  const Run run =
      Execute("'" + tool + "' attention --tokens 256 --queries 4 --model-layers 1 --threads 2");
  std::fputs(run.out.c_str(), stderr);
  if (run.exit_code != 0) r.Fail("attention exited with " + std::to_string(run.exit_code));
  const std::vector<std::string> storages = {
      "f16",  "bf16", "int8", "int8 K + int4 V", "int8 K + int4h V", "int4", "int4h K + int4 V",
      "int4h"};
  std::map<std::string, std::map<std::string, Errors>> sets;  // data set -> storage -> errors
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    const std::vector<std::string> c = Cells(line);
    Errors e;
    if (c.size() != 4 || !ParseNumber(c[2], e.max) || !ParseNumber(c[3], e.mean)) continue;
    sets[c[0]][c[1]] = e;
  }
  const std::vector<std::string> set_names = {"random N(0, 1)", "random, 4 K channels x10",
                                              "tiny model layer 0"};
  for (const std::string& set : set_names) {
    const auto found = sets.find(set);
    if (found == sets.end()) {
      r.Fail("attention: no rows for \"" + set + "\"");
      continue;
    }
    for (const std::string& s : storages) {
      const auto row = found->second.find(s);
      if (row == found->second.end()) {
        r.Fail("attention, " + set + ": no row for " + s);
      } else {
        CheckErrors(r, "attention, " + set + ", " + s, row->second);
      }
    }
    CheckRanking(r, "attention, " + set, found->second,
                 {{"f16"},
                  {"bf16"},
                  {"int8"},
                  {"int8 K + int4 V", "int8 K + int4h V", "int4", "int4h K + int4 V", "int4h"}});
  }
  if (sets.size() != set_names.size()) {
    r.Fail("attention: expected 3 data sets, got " + std::to_string(sets.size()));
  }
}

void CheckLogits(Report& r, const std::string& tool) {
  const Run run = Execute("'" + tool + "' logits --tokens 16 --prompt 8 --threads 2");
  std::fputs(run.out.c_str(), stderr);
  if (run.exit_code != 0) r.Fail("logits exited with " + std::to_string(run.exit_code));
  std::map<std::string, Errors> rows;
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    const std::vector<std::string> c = Cells(line);
    Errors e;
    double changes = 0;
    if (c.size() != 4 || !ParseNumber(c[1], e.max) || !ParseNumber(c[2], e.mean)) continue;
    const std::string changed = c[3].substr(0, c[3].find(' '));
    if (!ParseNumber(changed, changes) || changes < 0 || changes > 16) {
      r.Fail("logits, " + c[0] + ": greedy changes \"" + c[3] + "\" not a count in 0..16");
    }
    rows[c[0]] = e;
  }
  const std::vector<std::string> dtypes = {"f32", "bf16", "int8", "int4", "int4h"};
  for (const std::string& s : dtypes) {
    const auto row = rows.find(s);
    if (row == rows.end()) {
      r.Fail("logits: no row for " + s);
    } else {
      CheckErrors(r, "logits, " + s, row->second);
    }
  }
  // Against the f16-cache run: f32 differs by f16's rounding alone.
  CheckRanking(r, "logits", rows, {{"f32"}, {"bf16"}, {"int8"}, {"int4", "int4h"}});
}

void CheckRefusal(Report& r, const std::string& tool) {
  const Run run = Execute("'" + tool + "' attention --queries 0 2>&1 >/dev/null");
  std::fprintf(stderr, "stderr of --queries 0: %s", run.out.c_str());
  if (run.exit_code != 1) r.Fail("--queries 0: exit " + std::to_string(run.exit_code) + ", not 1");
  if (std::count(run.out.begin(), run.out.end(), '\n') != 1 ||
      run.out.find("--queries 0") == std::string::npos) {
    r.Fail("--queries 0: expected one line on stderr naming \"--queries 0\"");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ringkv_kv_accuracy_check <ringkv_kv_accuracy>\n");
    return 2;
  }
  Report report;
  CheckAttention(report, argv[1]);
  CheckLogits(report, argv[1]);
  CheckRefusal(report, argv[1]);
  if (report.failures == 0) std::fprintf(stderr, "all checks hold\n");
  return report.failures == 0 ? 0 : 1;
}
