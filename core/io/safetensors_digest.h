// Digests that a Lockstep safetensors file keeps of itself, so that a flipped byte
// anywhere in it is found when it is read (core/io/safetensors.h writes and checks them).
// Both live in the header's __metadata__, so that the file stays plain safetensors (Python's
// safetensors and Flax load it as any other):
//   lockstep.tensor_digests  a JSON object: each tensor's name -> SHA-256 of its bytes (hex)
//   lockstep.header_digest   SHA-256 (hex) of the file's first 8 + N bytes (the length and
//                            the JSON header, padding included) with this value's own 64
//                            characters read as "0"s: every header byte but its own.
// A file with neither key was written by another tool or before Lockstep kept digests; one
// with either must have both, and both must match (a flipped byte cannot remove both).
// Files rewritten by another tool (their header then differs) must drop both keys.
//
// Thread safety: functions of their arguments only.
#ifndef LOCKSTEP_CORE_IO_SAFETENSORS_DIGEST_H_
#define LOCKSTEP_CORE_IO_SAFETENSORS_DIGEST_H_

#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "core/io/safetensors.h"

namespace lockstep {

inline constexpr char kTensorDigestsKey[] = "lockstep.tensor_digests";
inline constexpr char kHeaderDigestKey[] = "lockstep.header_digest";

// SHA-256 of `bytes` as 64 lower-case hex digits.
std::string Sha256Hex(std::string_view bytes);

// The value of kTensorDigestsKey for `tensors`.
std::string TensorDigests(const std::map<std::string, SafeTensor>& tensors);

// The header digest's value before it is known: 64 "0"s, which SealHeader replaces.
std::string HeaderDigestPlaceholder();

// `head` is the file's first 8 + N bytes, its metadata holding HeaderDigestPlaceholder()
// under kHeaderDigestKey: writes the digest over the placeholder (the same length, so
// nothing moves). INTERNAL when the placeholder is not found exactly once.
absl::Status SealHeader(std::string& head);

// Whether the file's metadata holds digests (either key).
bool HasDigests(const std::map<std::string, std::string>& metadata);

// Checks the digests of a file read from `path`: its `head` (first 8 + N bytes), its
// metadata and tensors, `data_bytes` (how many bytes follow the header) and `data_end`
// (where the last tensor's bytes end): no byte may lie outside the tensors. DATA_LOSS naming the
// file and the header or the tensor that does not match. OK for a file without digests (HasDigests
// false).
absl::Status CheckDigests(const std::string& path, std::string_view head,
                          const std::map<std::string, std::string>& metadata,
                          const std::map<std::string, SafeTensor>& tensors, uint64_t data_bytes,
                          uint64_t data_end);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_IO_SAFETENSORS_DIGEST_H_
