// The safetensors file format (huggingface/safetensors): an 8-byte little-endian header length, a
// JSON header naming each tensor's dtype, shape and byte range, then the raw data. Contract:
// safetensors.h.
#include "core/io/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/io/durable_file.h"
#include "core/io/safetensors_digest.h"

namespace lockstep {
namespace {

size_t DtypeSize(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL") return 1;
  return 0;
}

// A header array of non-negative integers; nullopt for anything else. nlohmann's get<>
// would convert a float such as 1e19 with a cast, undefined out of range (found by
// safetensors_fuzz under UBSan).
std::optional<std::vector<uint64_t>> Naturals(const nlohmann::json& a) {
  if (!a.is_array()) return std::nullopt;
  std::vector<uint64_t> out;
  for (const auto& e : a) {
    if (!e.is_number_unsigned()) return std::nullopt;
    out.push_back(e.get<uint64_t>());
  }
  return out;
}

}  // namespace

absl::StatusOr<SafeTensors> SafeTensors::Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::vector<uint8_t> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (raw.size() < 8) return absl::DataLossError(absl::StrCat(path, ": truncated header"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | raw[i];
  if (n > raw.size() - 8) return absl::DataLossError(absl::StrCat(path, ": truncated header"));
  SafeTensors st;
  st.source_ = path;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(raw.begin() + 8, raw.begin() + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad header: ", e.what()));
  }
  const size_t base = 8 + n;
  uint64_t data_end = 0;
  try {
    for (const auto& [name, v] : header.items()) {
      if (name == "__metadata__") {
        for (const auto& [k, m] : v.items()) st.metadata_[k] = m.get<std::string>();
        continue;
      }
      SafeTensor t;
      t.dtype = v.at("dtype").get<std::string>();
      const std::optional<std::vector<uint64_t>> dims = Naturals(v.at("shape"));
      const std::optional<std::vector<uint64_t>> off = Naturals(v.at("data_offsets"));
      // Counted without wrapping: a shape of 2^62 x 4 float32s must not read as 0 bytes.
      uint64_t count = 1;
      bool bad_shape = !dims.has_value();
      for (uint64_t d : dims.value_or(std::vector<uint64_t>())) {
        bad_shape = bad_shape || d > INT64_MAX || __builtin_mul_overflow(count, d, &count);
        t.shape.push_back(static_cast<int64_t>(d));
      }
      if (bad_shape) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", name, ": bad shape"));
      }
      uint64_t bytes = 0;
      if (!off.has_value() || off->size() != 2 || (*off)[0] > (*off)[1] ||
          (*off)[1] > raw.size() - base ||
          __builtin_mul_overflow(count, DtypeSize(t.dtype), &bytes) ||
          (*off)[1] - (*off)[0] != bytes) {
        return absl::DataLossError(absl::StrCat(path, ": tensor ", name, ": bad data_offsets"));
      }
      t.data.assign(raw.begin() + base + (*off)[0], raw.begin() + base + (*off)[1]);
      data_end = std::max(data_end, (*off)[1]);
      st.tensors_[name] = std::move(t);
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad header: ", e.what()));
  }
  const std::string_view head(reinterpret_cast<const char*>(raw.data()), base);
  if (absl::Status digests =
          CheckDigests(path, head, st.metadata_, st.tensors_, raw.size() - base, data_end);
      !digests.ok()) {
    return digests;
  }
  st.digested_ = HasDigests(st.metadata_);
  st.metadata_.erase(kTensorDigestsKey);
  st.metadata_.erase(kHeaderDigestKey);
  return st;
}

absl::Status SafeTensors::Write(const std::string& path) const {
  nlohmann::json header = nlohmann::json::object();
  std::map<std::string, std::string> metadata = metadata_;
  metadata[kTensorDigestsKey] = TensorDigests(tensors_);
  metadata[kHeaderDigestKey] = HeaderDigestPlaceholder();
  header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors_) {
    header[name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>(uint64_t{h.size()} >> (8 * i));
  head += h;
  if (absl::Status sealed = SealHeader(head); !sealed.ok()) return sealed;
  std::vector<std::string_view> parts = {head};
  for (const auto& [name, t] : tensors_) {
    parts.emplace_back(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  }
  return WriteFileDurably(path, parts);
}

void SafeTensors::Add(const std::string& name, std::string dtype, std::vector<int64_t> shape,
                      const void* data, size_t bytes) {
  SafeTensor t{std::move(dtype), std::move(shape), {}};
  t.data.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
  tensors_[name] = std::move(t);
}

template <typename T>
absl::StatusOr<std::vector<T>> SafeTensors::Get(const std::string& name, const char* dtype) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(source_, ": no tensor ", name));
  }
  if (it->second.dtype != dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": tensor ", name, " is ", it->second.dtype, ", not ", dtype));
  }
  std::vector<T> v(it->second.data.size() / sizeof(T));
  // An empty tensor's data() may be null, and memcpy from null is undefined even for 0 bytes.
  if (!v.empty()) std::memcpy(v.data(), it->second.data.data(), v.size() * sizeof(T));
  return v;
}

absl::StatusOr<std::vector<float>> SafeTensors::F32(const std::string& n) const {
  return Get<float>(n, "F32");
}
absl::StatusOr<std::vector<int32_t>> SafeTensors::I32(const std::string& n) const {
  return Get<int32_t>(n, "I32");
}
absl::StatusOr<std::vector<int64_t>> SafeTensors::I64(const std::string& n) const {
  return Get<int64_t>(n, "I64");
}
absl::StatusOr<std::vector<uint32_t>> SafeTensors::U32(const std::string& n) const {
  return Get<uint32_t>(n, "U32");
}
absl::StatusOr<std::vector<uint8_t>> SafeTensors::U8(const std::string& n) const {
  return Get<uint8_t>(n, "U8");
}

}  // namespace lockstep
