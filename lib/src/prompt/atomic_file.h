#pragma once
// Whole-file I/O for the prompt cache's files.

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace ringkv::detail {

// Writes the parts, in order, to a temporary file in path's directory, fsyncs
// it, renames it over `path` and fsyncs the directory: a crash at any point
// leaves either the old file or the new one. Throws ringkv::Error prefixed with
// [function] naming the failing step and errno's text.
void WriteFileAtomically(const std::string& path, std::span<const std::span<const std::byte>> parts,
                         const char* function);

}  // namespace ringkv::detail
