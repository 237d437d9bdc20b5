#pragma once
// A fresh directory per test (mkdtemp), removed afterwards: two concurrent runs
// of the suite, or two tests of one run, never share a file name.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace ringkv::test {

class ScratchDir {
 public:
  ScratchDir() {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info == nullptr ? "x" : info->name();
    for (char& c : name) {
      if (std::isalnum(static_cast<unsigned char>(c)) == 0)
        c = '_';  // parameterised names hold '/'
    }
    std::string pattern =
        (std::filesystem::temp_directory_path() / ("ringkv_prompt_" + name + "_XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp " << pattern << " failed";
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& Path() const noexcept { return path_; }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace ringkv::test
