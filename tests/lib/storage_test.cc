// Where Storage puts the bytes it owns: 64 B-aligned, and from 2 MiB up (the
// size of a CausalCache pool block or of a long K or V tensor) a few 4 KiB
// pages into a huge page, the number varying from one huge page to the next,
// and advised for transparent huge pages on x86-64 Linux. The advice is
// checked in the kernel's record of the mapping (the "hg" flag in
// /proc/self/smaps), not through timing, and it must not change the bytes:
// zeroed when asked, and every byte writable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ringkv/tensor.h"

namespace ringkv {
namespace {

constexpr std::size_t kTwoMiB = std::size_t{2} << 20;

std::uintptr_t Address(const Storage& s) { return reinterpret_cast<std::uintptr_t>(s.Data()); }

bool AllZero(const Storage& s) {
  return std::all_of(s.Data(), s.Data() + s.Bytes(), [](std::byte b) { return b == std::byte{0}; });
}

TEST(StorageTest, BelowTwoMiBTheBytesAreCacheLineAligned) {
  for (const std::size_t bytes : {std::size_t{1}, std::size_t{4096}, kTwoMiB - 64}) {
    const Storage s(bytes);
    EXPECT_EQ(Address(s) % 64, 0u) << bytes << " bytes";
    EXPECT_EQ(s.Bytes(), bytes);
    EXPECT_TRUE(AllZero(s)) << bytes << " bytes";
  }
}

// Pages from the huge-page boundary below `address` to it.
std::size_t PagesIntoHugePage(std::uintptr_t address) { return address % kTwoMiB / 4096; }

TEST(StorageTest, FromTwoMiBUpTheBytesStartAFewPagesIntoAHugePage) {
  for (const std::size_t bytes : {kTwoMiB, kTwoMiB + 4096 + 3, 5 * kTwoMiB}) {
    const Storage zeroed(bytes);
    EXPECT_EQ(Address(zeroed) % 4096, 0u) << bytes << " bytes";
    EXPECT_LT(PagesIntoHugePage(Address(zeroed)), 16u) << bytes << " bytes";
    EXPECT_TRUE(AllZero(zeroed)) << bytes << " bytes";

    // Uninitialized storage is written in full by its owner: every byte must be
    // ours to write (AddressSanitizer checks the ends).
    Storage raw(bytes, Storage::Init::kUninitialized);
    EXPECT_EQ(Address(raw) % 4096, 0u) << bytes << " bytes";
    EXPECT_LT(PagesIntoHugePage(Address(raw)), 16u) << bytes << " bytes";
    std::fill(raw.Data(), raw.Data() + bytes, std::byte{0x5a});
    EXPECT_EQ(raw.Data()[bytes - 1], std::byte{0x5a});
  }
}

TEST(StorageTest, LargeBuffersLiveSideBySideStartAtDifferentOffsets) {
  // Like a layer's K and V: without the offsets all sixteen would start on a
  // huge-page boundary.
  std::vector<std::unique_ptr<Storage>> buffers;
  std::set<std::size_t> offsets;
  for (int i = 0; i < 16; ++i) {
    buffers.push_back(std::make_unique<Storage>(4 * kTwoMiB, Storage::Init::kUninitialized));
    offsets.insert(PagesIntoHugePage(Address(*buffers.back())));
  }
  EXPECT_GE(offsets.size(), 4u);
}

#if defined(__linux__) && defined(__x86_64__)
// The VmFlags of the mapping that holds `address`, from /proc/self/smaps ("" when
// no mapping holds it). Emulators (qemu-user for the arm64 suite) neither carry
// out the advice nor show the guest's mappings there, hence x86-64 only.
std::string VmFlagsAt(std::uintptr_t address) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    const std::size_t dash = line.find('-');
    const std::size_t space = line.find(' ');
    if (dash != std::string::npos && space != std::string::npos && dash < space &&
        line.find(':') > space) {  // a mapping's header: "start-end perms ..."
      const std::uintptr_t begin = std::stoull(line.substr(0, dash), nullptr, 16);
      const std::uintptr_t end = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
      inside = begin <= address && address < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool HasFlag(const std::string& vm_flags, const std::string& flag) {
  std::istringstream words(vm_flags);
  std::string word;
  while (words >> word) {
    if (word == flag) return true;
  }
  return false;
}

TEST(StorageTest, FromTwoMiBUpTheMappingIsAdvisedForHugePages) {
  const Storage s(3 * kTwoMiB + 4096, Storage::Init::kUninitialized);
  const std::string flags = VmFlagsAt(Address(s));
  ASSERT_FALSE(flags.empty()) << "no mapping in /proc/self/smaps holds " << std::hex << Address(s);
  EXPECT_TRUE(HasFlag(flags, "hg")) << flags;
  // The advice covers the storage's own bytes, through its last whole page.
  EXPECT_TRUE(HasFlag(VmFlagsAt(Address(s) + 3 * kTwoMiB), "hg"));
}
#endif

}  // namespace
}  // namespace ringkv
