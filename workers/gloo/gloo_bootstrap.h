// The bootstrap of a GlooCollective: binds the rank's TCP device to the address peers use
// (GlooOptions.hostname or .interface, never a wildcard), and joins the full mesh through
// the store with authenticated pairings (auth_transport.h), retrying in place when an
// attempt fails on some rank for a transport reason (bootstrap_retry.h). Attempt k's
// keys are under "PREFIX/k/": Gloo's own ("R": rank R's pair addresses, "rank_R") and
// "nonce/R", the nonce rank R's listening pairs expect in the token.
#ifndef LOCKSTEP_WORKERS_GLOO_GLOO_BOOTSTRAP_H_
#define LOCKSTEP_WORKERS_GLOO_GLOO_BOOTSTRAP_H_

#include <chrono>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/store.h"
#include "workers/gloo/gloo_collective.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace lockstep::gloo_internal {

// Gloo's milliseconds, where zero means "no timeout": rounded up, so that a short positive
// timeout stays a timeout.
std::chrono::milliseconds ToGlooTimeout(absl::Duration timeout);

// INVALID_ARGUMENT for a bad rank, size, store or option, naming it.
absl::Status ValidateBootstrap(int rank, int size, const Store* store, const GlooOptions& options);

// The connected context of `rank` of `size`, within options.connect_timeout for all
// attempts together. Errors: as GlooCollective::Create.
absl::StatusOr<std::shared_ptr<gloo::Context>> Bootstrap(int rank, int size, Store* store,
                                                         const GlooOptions& options);

}  // namespace lockstep::gloo_internal

#endif  // LOCKSTEP_WORKERS_GLOO_GLOO_BOOTSTRAP_H_
