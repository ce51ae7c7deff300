// Digests that a Lockstep safetensors file keeps of itself, so that a flipped byte anywhere in it
// is found when it is read (core/io/safetensors.h writes and checks them). Contract:
// safetensors_digest.h.
#include "core/io/safetensors_digest.h"

#include <openssl/evp.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

constexpr size_t kHexDigits = 64;

// Where the header digest's value starts in `head`, if `"KEY":"` occurs exactly once (a
// JSON string can hold a quote only escaped, so no value can fake it).
std::optional<size_t> DigestValueAt(std::string_view head) {
  const std::string key = absl::StrCat("\"", kHeaderDigestKey, "\":\"");
  const size_t at = head.find(key);
  if (at == std::string_view::npos || head.find(key, at + 1) != std::string_view::npos ||
      at + key.size() + kHexDigits > head.size()) {
    return std::nullopt;
  }
  return at + key.size();
}

absl::Status Damaged(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what, " (the file is damaged)"));
}

}  // namespace

std::string Sha256Hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

std::string TensorDigests(const std::map<std::string, SafeTensor>& tensors) {
  nlohmann::json digests = nlohmann::json::object();
  for (const auto& [name, t] : tensors) {
    digests[name] =
        Sha256Hex(std::string_view(reinterpret_cast<const char*>(t.data.data()), t.data.size()));
  }
  return digests.dump();
}

std::string HeaderDigestPlaceholder() { return std::string(kHexDigits, '0'); }

absl::Status SealHeader(std::string& head) {
  const std::optional<size_t> at = DigestValueAt(head);
  if (!at.has_value() || head.compare(*at, kHexDigits, HeaderDigestPlaceholder()) != 0) {
    return absl::InternalError("safetensors: the header digest's placeholder is not in the header");
  }
  head.replace(*at, kHexDigits, Sha256Hex(head));
  return absl::OkStatus();
}

bool HasDigests(const std::map<std::string, std::string>& metadata) {
  return metadata.count(kTensorDigestsKey) > 0 || metadata.count(kHeaderDigestKey) > 0;
}

absl::Status CheckDigests(const std::string& path, std::string_view head,
                          const std::map<std::string, std::string>& metadata,
                          const std::map<std::string, SafeTensor>& tensors, uint64_t data_bytes,
                          uint64_t data_end) {
  if (!HasDigests(metadata)) return absl::OkStatus();
  auto header_digest = metadata.find(kHeaderDigestKey);
  auto tensor_digests = metadata.find(kTensorDigestsKey);
  if (header_digest == metadata.end() || tensor_digests == metadata.end()) {
    return Damaged(
        path, absl::StrCat("the header lacks ",
                           header_digest == metadata.end() ? kHeaderDigestKey : kTensorDigestsKey));
  }
  // The header first: it says where every tensor is and what its digest is.
  const std::optional<size_t> at = DigestValueAt(head);
  if (!at.has_value() || header_digest->second.size() != kHexDigits) {
    return Damaged(path, absl::StrCat("the header's ", kHeaderDigestKey, " cannot be found"));
  }
  std::string zeroed(head);
  zeroed.replace(*at, kHexDigits, HeaderDigestPlaceholder());
  if (Sha256Hex(zeroed) != header_digest->second) {
    return Damaged(path, absl::StrCat("the header does not match its digest ", kHeaderDigestKey,
                                      " (or another tool rewrote the file and kept the key)"));
  }
  if (data_bytes != data_end) {
    return Damaged(
        path, absl::StrCat(data_bytes, " bytes follow the header, the tensors end at ", data_end));
  }
  const nlohmann::json digests = nlohmann::json::parse(tensor_digests->second, nullptr, false);
  if (!digests.is_object() || digests.size() != tensors.size()) {
    return Damaged(path, absl::StrCat(kTensorDigestsKey, " does not list the file's ",
                                      tensors.size(), " tensors"));
  }
  for (const auto& [name, t] : tensors) {
    auto want = digests.find(name);
    if (want == digests.end() || !want->is_string()) {
      return Damaged(path, absl::StrCat("tensor ", name, " has no digest"));
    }
    const std::string got =
        Sha256Hex(std::string_view(reinterpret_cast<const char*>(t.data.data()), t.data.size()));
    if (got != want->get<std::string>()) {
      return Damaged(path, absl::StrCat("tensor ", name, " does not match its digest"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep
