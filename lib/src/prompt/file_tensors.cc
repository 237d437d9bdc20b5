#include "file_tensors.h"

#include <fmt/ranges.h>

#define XXH_INLINE_ALL  // header-only: nothing for users of ringkv_core to link
#include <xxhash.h>

#include <algorithm>
#include <climits>
#include <gsl/assert>
#include <vector>

namespace ringkv::detail {
namespace {

TensorEntry ParseEntry(const json& info, const std::string& where, std::uint64_t data_size) {
  if (!info.is_object()) Bad("{} is {}, not an object", where, Describe(info));
  TensorEntry e;
  const std::string dtype = String(info, "dtype", where);
  e.u8 = dtype == "U8";
  if (!e.u8) e.dtype = ParseDType(dtype, where);
  const json& shape = Field(info, "shape", where);
  if (!shape.is_array() || shape.size() != 4) {
    Bad("{} has shape {}, not 4 dims", where, Describe(shape));
  }
  std::uint64_t elements = 1;
  for (std::size_t d = 0; d < 4; ++d) {
    const json& dim = shape[d];
    bool ok = dim.is_number_integer();
    if (ok && dim.is_number_unsigned()) {
      ok = dim.get<std::uint64_t>() >= 1 && dim.get<std::uint64_t>() <= INT_MAX;
    } else if (ok) {
      ok = dim.get<std::int64_t>() >= 1 && dim.get<std::int64_t>() <= INT_MAX;
    }
    if (!ok) {
      Bad("{} has dim {} = {}, not an integer in [1, {}]", where, d, Describe(dim), INT_MAX);
    }
    e.shape[d] = dim.get<std::int64_t>();
    elements *= static_cast<std::uint64_t>(e.shape[d]);
    // Each factor <= INT_MAX and the product kept <= data_size: no overflow.
    if (elements > data_size) {
      Bad("{} with shape [{}] needs more than the {} bytes of the data section", where,
          fmt::join(e.shape.begin(), e.shape.begin() + static_cast<std::ptrdiff_t>(d) + 1, ", "),
          data_size);
    }
  }
  const json& offsets = Field(info, "data_offsets", where);
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    Bad("{} has data_offsets {}, not two unsigned integers", where, Describe(offsets));
  }
  e.begin = offsets[0].get<std::uint64_t>();
  e.end = offsets[1].get<std::uint64_t>();
  if (e.begin > e.end || e.end > data_size) {
    Bad("{} spans bytes [{}, {}) of a data section of {} bytes (truncated?)", where, e.begin, e.end,
        data_size);
  }
  const std::uint64_t needed = elements * (e.u8 ? 1 : SizeOf(e.dtype));
  if (e.end - e.begin != needed) {
    Bad("{} spans {} bytes, its shape [{}] needs {}", where, e.end - e.begin,
        fmt::join(e.shape, ", "), needed);
  }
  return e;
}

// Every byte of the data section in exactly one tensor.
void CheckTiling(const TensorTable& tensors, std::uint64_t data_size) {
  std::vector<const TensorTable::value_type*> order;
  order.reserve(tensors.size());
  for (const auto& entry : tensors) order.push_back(&entry);
  std::sort(order.begin(), order.end(),
            [](const auto* a, const auto* b) { return a->second.begin < b->second.begin; });
  for (std::size_t i = 1; i < order.size(); ++i) {
    const TensorEntry& a = order[i - 1]->second;
    const TensorEntry& b = order[i]->second;
    if (b.begin < a.end) {
      Bad("tensors {} and {} overlap: bytes [{}, {}) and [{}, {})", order[i - 1]->first,
          order[i]->first, a.begin, a.end, b.begin, b.end);
    }
  }
  std::uint64_t covered = 0;
  for (const auto* entry : order) {
    if (entry->second.begin > covered) {
      Bad("bytes [{}, {}) of the data section are not covered by any tensor", covered,
          entry->second.begin);
    }
    covered = entry->second.end;
  }
  if (covered != data_size) {
    Bad("bytes [{}, {}) of the data section are not covered by any tensor", covered, data_size);
  }
}

void Check(const TensorTable::value_type& tensor, std::uint64_t actual) {
  if (actual != tensor.second.checksum) {
    Bad("tensor {} has checksum {:016x}, the header says {:016x}", tensor.first, actual,
        tensor.second.checksum);
  }
}

}  // namespace

std::string_view EntryDTypeName(const TensorEntry& e) noexcept {
  return e.u8 ? "U8" : DTypeName(e.dtype);
}

std::span<const std::byte> TensorBytes::Bytes() const noexcept {
  if (tensor.Empty()) return bytes;
  return {static_cast<const std::byte*>(tensor.Data()), tensor.NumBytes()};
}

void TensorWriter::Add(const std::string& name, const Tensor& tensor) {
  const std::uint64_t size = tensor.NumBytes();
  entries[name] = json{{"dtype", SafetensorsDType(tensor.Dtype())},
                       {"shape", {tensor.Dim(0), tensor.Dim(1), tensor.Dim(2), tensor.Dim(3)}},
                       {"data_offsets", {bytes, bytes + size}}};
  checksums[name] = fmt::format("{:016x}", XXH3_64bits(tensor.Data(), size));
  bytes += size;
  tensors.push_back(TensorBytes{tensor, {}});
}

void TensorWriter::AddBytes(const std::string& name, const std::array<std::int64_t, 4>& shape,
                            std::vector<std::byte> data) {
  Expects(static_cast<std::uint64_t>(shape[0] * shape[1] * shape[2] * shape[3]) == data.size());
  const std::uint64_t size = data.size();
  entries[name] = json{{"dtype", "U8"},
                       {"shape", {shape[0], shape[1], shape[2], shape[3]}},
                       {"data_offsets", {bytes, bytes + size}}};
  checksums[name] = fmt::format("{:016x}", XXH3_64bits(data.data(), size));
  bytes += size;
  tensors.push_back(TensorBytes{Tensor(), std::move(data)});
}

TensorTable ParseTensors(const json& header, std::uint64_t data_size) {
  TensorTable tensors;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    tensors.emplace(name, ParseEntry(info, "tensor " + name.substr(0, 64), data_size));
  }
  CheckTiling(tensors, data_size);
  return tensors;
}

void AttachChecksums(TensorTable& tensors, const json& checksums) {
  if (!checksums.is_object())
    Bad("__metadata__.checksums is {}, not an object", Describe(checksums));
  for (auto& [name, e] : tensors) {
    const auto it = checksums.find(name);
    if (it == checksums.end() || !it->is_string()) Bad("tensor {} has no checksum", name);
    const std::string& hex = it->get_ref<const std::string&>();
    std::uint64_t value = 0;
    bool ok = hex.size() == 16;
    for (const char c : hex) {
      const bool digit = c >= '0' && c <= '9', letter = c >= 'a' && c <= 'f';
      ok = ok && (digit || letter);
      value = (value << 4) | static_cast<std::uint64_t>(digit ? c - '0' : c - 'a' + 10);
    }
    if (!ok) Bad("tensor {} has checksum {}, not 16 hex digits", name, Describe(*it));
    e.checksum = value;
  }
}

void CheckAllUsed(const TensorTable& tensors, std::string_view owner) {
  for (const auto& [name, e] : tensors) {
    if (!e.used) Bad("tensor {} belongs to no {}", name, owner);
  }
}

Tensor ReadTensor(const ByteSource& source, std::uint64_t data_offset,
                  const TensorTable::value_type& tensor) {
  const TensorEntry& e = tensor.second;
  Expects(!e.u8);
  Tensor t = Tensor::Uninitialized(e.dtype, {e.shape[0], e.shape[1], e.shape[2], e.shape[3]});
  auto* bytes = static_cast<std::byte*>(t.MutableData());
  source.Read(data_offset + e.begin, std::span<std::byte>(bytes, e.Bytes()));
  Check(tensor, XXH3_64bits(bytes, e.Bytes()));
  return t;
}

std::vector<std::byte> ReadBytes(const ByteSource& source, std::uint64_t data_offset,
                                 const TensorTable::value_type& tensor) {
  const TensorEntry& e = tensor.second;
  Expects(e.u8);
  // The size was checked against the data section, so against the file's size.
  std::vector<std::byte> bytes(static_cast<std::size_t>(e.Bytes()));
  source.Read(data_offset + e.begin, bytes);
  Check(tensor, XXH3_64bits(bytes.data(), bytes.size()));
  return bytes;
}

void VerifyTensor(const ByteSource& source, std::uint64_t data_offset,
                  const TensorTable::value_type& tensor, const RowVisitor& rows) {
  const TensorEntry& e = tensor.second;
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  // Whole rows per chunk (about 1 MiB, at least one row); the size was checked
  // against the file, so a row never outgrows it.
  const auto row = static_cast<std::uint64_t>(e.shape[3]) * (e.u8 ? 1 : SizeOf(e.dtype));
  std::vector<std::byte> chunk(static_cast<std::size_t>(
      std::min<std::uint64_t>(e.Bytes(), std::max<std::uint64_t>(1, (1 << 20) / row) * row)));
  for (std::uint64_t at = 0; at < e.Bytes(); at += chunk.size()) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), e.Bytes() - at));
    source.Read(data_offset + e.begin + at, std::span<std::byte>(chunk.data(), n));
    XXH3_64bits_update(&state, chunk.data(), n);
    if (rows)
      rows(static_cast<std::int64_t>(at / row), std::span<const std::byte>(chunk.data(), n));
  }
  Check(tensor, XXH3_64bits_digest(&state));
}

}  // namespace ringkv::detail
