#pragma once
// The temporary files of atomic saves: <name>.tmp.<pid>.<8 lowercase hex digits>
// in the target's directory, the name cut so the whole stays within NAME_MAX,
// and the clean-up of the ones killed saves left behind.

#include <cstdint>
#include <string>

namespace ringkv::detail {

// The temporary file name (no directory) for saving to file `name`.
std::string TempName(const std::string& name, long pid, std::uint32_t random);

// Whether `name` has the form TempName produces.
bool IsTempName(const std::string& name, long* pid);

// Removes the stale temporary files in `directory`: regular files of the form
// above, untouched for 10 minutes whose process is gone, or untouched for a day
// (a reused pid, another pid namespace). Best effort: errors are ignored.
void RemoveStaleTemps(const std::string& directory) noexcept;

}  // namespace ringkv::detail
