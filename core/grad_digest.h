// GradDigest: the 64-bit digest the job's audit compares (docs/audit.md): XXH64 (seed 0)
// of the bytes given, written here because Debian ships libxxhash without its header.
// Fast (about 8 bytes a cycle), not cryptographic: it tells a wrong gradient from a right
// one, it does not stop a worker that forges the digest itself.
#ifndef LOCKSTEP_CORE_GRAD_DIGEST_H_
#define LOCKSTEP_CORE_GRAD_DIGEST_H_

#include <cstdint>
#include <span>

namespace lockstep {

// XXH64 of `bytes` with seed 0.
uint64_t Xxh64(std::span<const unsigned char> bytes);

// Xxh64 of the floats' bytes (little-endian float32, in order).
inline uint64_t GradDigest(std::span<const float> values) {
  return Xxh64({reinterpret_cast<const unsigned char*>(values.data()), values.size_bytes()});
}

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_GRAD_DIGEST_H_
