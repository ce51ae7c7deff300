// The bootstrap of a GlooCollective: listens on the address peers use (GlooOptions.hostname
// or .interface, never a wildcard), and joins the full mesh of TCP connections
// (tcp_mesh.h) through the store with authenticated pairings (auth_transport.h), retrying
// in place when an attempt fails on some rank for a transport reason (bootstrap_retry.h).
// Attempt k's keys are under "PREFIX/k/": "R", rank R's listening address, and "nonce/R",
// the nonce the tokens to and from rank R carry.
#ifndef LOCKSTEP_WORKERS_GLOO_GLOO_BOOTSTRAP_H_
#define LOCKSTEP_WORKERS_GLOO_GLOO_BOOTSTRAP_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/store.h"
#include "workers/gloo/gloo_collective.h"
#include "workers/gloo/tcp_mesh.h"

namespace lockstep::gloo_internal {

// INVALID_ARGUMENT for a bad rank, size, store or option, naming it.
absl::Status ValidateBootstrap(int rank, int size, const Store* store, const GlooOptions& options);

// The connected mesh of `rank` of `size`, within options.connect_timeout for all attempts
// together. Errors: as GlooCollective::Create.
absl::StatusOr<std::shared_ptr<TcpMesh>> Bootstrap(int rank, int size, Store* store,
                                                   const GlooOptions& options);

}  // namespace lockstep::gloo_internal

#endif  // LOCKSTEP_WORKERS_GLOO_GLOO_BOOTSTRAP_H_
