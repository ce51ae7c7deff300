// The safetensors file format (huggingface/safetensors): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then the raw
// data. Lockstep writes checkpoints in it and reads golden files from it.
#ifndef LOCKSTEP_CORE_IO_SAFETENSORS_H_
#define LOCKSTEP_CORE_IO_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

struct SafeTensor {
  std::string dtype;  // "F32", "U32", "I32", "U8", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

class SafeTensors {
 public:
  // Errors name the file: NOT_FOUND, DATA_LOSS (truncated, bad offsets, a header or a
  // tensor that does not match its digest, naming it), INVALID_ARGUMENT (bad header).
  // A file with digests (core/io/safetensors_digest.h) is read only if every one matches;
  // their keys are not in metadata().
  static absl::StatusOr<SafeTensors> Read(const std::string& path);
  // Writes atomically and durably (core/io/durable_file.h), with the digests of its header
  // and of every tensor in its metadata.
  absl::Status Write(const std::string& path) const;

  // Whether the file read held digests, all of which matched (false for files of other
  // tools, or of Lockstep before it kept digests).
  bool digested() const { return digested_; }

  void Add(const std::string& name, std::string dtype, std::vector<int64_t> shape, const void* data,
           size_t bytes);
  void AddF32(const std::string& name, std::vector<int64_t> shape, std::span<const float> v) {
    Add(name, "F32", std::move(shape), v.data(), v.size_bytes());
  }

  const std::map<std::string, SafeTensor>& tensors() const { return tensors_; }
  std::map<std::string, std::string>& metadata() { return metadata_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The named tensor's values; NOT_FOUND or INVALID_ARGUMENT (wrong dtype).
  absl::StatusOr<std::vector<float>> F32(const std::string& name) const;
  absl::StatusOr<std::vector<int32_t>> I32(const std::string& name) const;
  absl::StatusOr<std::vector<int64_t>> I64(const std::string& name) const;
  absl::StatusOr<std::vector<uint32_t>> U32(const std::string& name) const;
  absl::StatusOr<std::vector<uint8_t>> U8(const std::string& name) const;

 private:
  template <typename T>
  absl::StatusOr<std::vector<T>> Get(const std::string& name, const char* dtype) const;

  std::string source_;
  bool digested_ = false;
  std::map<std::string, SafeTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_IO_SAFETENSORS_H_
