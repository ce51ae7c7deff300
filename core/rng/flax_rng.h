// Flax linen's per-module RNG derivation (reference §4): make_rng(stream) inside the
// scope of module path P, for the c-th call in that scope, returns
// fold_in(stream_root, first 4 bytes big-endian of SHA1(P..., c)).
#ifndef LOCKSTEP_CORE_RNG_FLAX_RNG_H_
#define LOCKSTEP_CORE_RNG_FLAX_RNG_H_

#include <cstdint>
#include <string_view>

#include "core/rng/threefry.h"

namespace lockstep::rng {

// The 32-bit hash Flax folds in for the c-th make_rng call in the scope of a top-level
// submodule called `module` (e.g. ("Dense_0", 1) -> 2998342421). An empty module name
// hashes only the counter (the root scope).
uint32_t FlaxScopeHash(std::string_view module, uint32_t counter);

// make_rng(stream) for the c-th call in module `module`, given the stream's root key.
Key FlaxMakeRng(Key stream_root, std::string_view module, uint32_t counter);

}  // namespace lockstep::rng

#endif  // LOCKSTEP_CORE_RNG_FLAX_RNG_H_
