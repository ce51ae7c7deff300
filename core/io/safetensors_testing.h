// Damaging safetensors files on purpose, for tests that every kind of tensor and the
// metadata are covered by a digest: where a tensor's bytes lie, and a table of damages
// (what a reader must name, where, how many bytes) applied one at a time.
#ifndef LOCKSTEP_CORE_IO_SAFETENSORS_TESTING_H_
#define LOCKSTEP_CORE_IO_SAFETENSORS_TESTING_H_

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep::testing {

// Where the bytes of tensor `name` of the safetensors file `bytes` start (the header's
// length is little-endian, as the hosts we run on are).
inline size_t TensorOffset(const std::string& bytes, const std::string& name) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  return 8 + n + header.at(name).at("data_offsets")[0].get<size_t>();
}

// `bytes` flipped at [at, at + count) (xor `mask`).
inline std::string Flipped(std::string bytes, size_t at, size_t count, char mask) {
  for (size_t i = 0; i < count; ++i) bytes[at + i] ^= mask;
  return bytes;
}

// One place to damage: the name a reader's error or log must give (a tensor, or "header"),
// the file offset, and how many bytes.
struct Damage {
  std::string what;
  size_t at;
  size_t bytes = 1;
};

// For each damage in turn: writes `whole` damaged there (xor `mask`) to `path`, and runs
// `check` under a SCOPED_TRACE naming it. `path` holds `whole` again at the end.
inline void ForEachDamage(const std::string& path, const std::string& whole,
                          const std::vector<Damage>& damages, char mask,
                          const std::function<void(const Damage&)>& check) {
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << Flipped(whole, d.at, d.bytes, mask);
    check(d);
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << whole;
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_CORE_IO_SAFETENSORS_TESTING_H_
