// GlooCollective: the CPU data plane. A Collective over TCP: the ranks of a job publish
// their addresses in a lockstep::Store (under a per-job prefix), connect a full mesh whose
// pairings are authenticated with a per-attempt nonce from the store (a stray or hostile
// connection to a rank's listener is dropped, not taken as a peer; auth_transport.h),
// retry that bootstrap in place when it fails on some rank (gloo_bootstrap.h), and
// all-reduce with a ring of our own over those connections (ring_allreduce.h,
// tcp_mesh.h; against Gloo's own all-reduce: bench/results/allreduce.md), or through shared
// memory where all ranks share a host (shm_allreduce.h). The name ("gloo", in records and
// logs) is the data plane's, first built on Gloo's TCP transport; no Gloo code runs in it
// now.
#ifndef LOCKSTEP_WORKERS_GLOO_GLOO_COLLECTIVE_H_
#define LOCKSTEP_WORKERS_GLOO_GLOO_COLLECTIVE_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/collective.h"
#include "core/store.h"

namespace lockstep {
namespace gloo_internal {
template <typename T>
class RingAllReduceOf;
using RingAllReduce = RingAllReduceOf<float>;
class ShmAllReduce;
class TcpMesh;
}  // namespace gloo_internal

struct GlooOptions {
  // The address peers use to reach this rank: a hostname or a numeric IP ("127.0.0.1"
  // for tests on one host; a worker's is its address on the route to the coordinator,
  // services/common/rpc/net.h LocalAddressFor). Set exactly one of hostname and interface.
  std::string hostname;
  // A network interface ("eth0") whose address to bind, as GLOO_SOCKET_IFNAME would.
  std::string interface;
  // The namespace of this job attempt in the store. All ranks of one mesh use the same
  // prefix; jobs and attempts that share a store must use different ones.
  std::string prefix = "gloo";
  // Bounds Create: waiting for every peer's address and connecting to it, all attempts
  // together.
  absl::Duration connect_timeout = absl::Seconds(30);
  // Bootstrap attempts (each under PREFIX/K/ in the store) before Create gives up; a
  // failed attempt is retried by every rank only for a transport error (UNAVAILABLE,
  // ABORTED) and while connect_timeout lasts.
  int bootstrap_attempts = 3;
  // Called on Create's thread when attempt `attempt` failed on some rank and is retried.
  std::function<void(int attempt, const absl::Status& why)> on_retry;
  // All-reduce through shared memory when every rank can open every other's segment (one
  // host, one /dev/shm, one user: shm_allreduce.h), with the same bits as over TCP;
  // otherwise, or when false, over TCP.
  bool shared_memory = true;
};

// Thread safety: any thread may call any method; AllReduceSum calls are serialized.
// After an error the collective closes its connections, so that its peers fail at once
// instead of waiting out their own timeouts, and every later call returns
// FAILED_PRECONDITION carrying the first error.
class GlooCollective final : public Collective {
 public:
  // Joins the mesh of `size` ranks as `rank`, blocking until all ranks have joined. The
  // result is a QueuedCollective (core/queued_collective.h) around the GlooCollective: its
  // StartAllReduceSum runs on a communication thread, in one FIFO with AllReduceSum.
  // `store` is used during Create only. Errors: INVALID_ARGUMENT for a bad rank, size or
  // option, or an address that cannot be bound (on any rank: every rank returns it);
  // DEADLINE_EXCEEDED when some rank has not joined within options.connect_timeout;
  // UNAVAILABLE when the peers could not be reached in bootstrap_attempts attempts;
  // the store's own errors (with context added) as they come. Create returns within
  // about connect_timeout: every wait of every attempt is bounded by its deadline.
  static absl::StatusOr<std::unique_ptr<Collective>> Create(int rank, int size, Store* store,
                                                            const GlooOptions& options);

  // Closes the connections; peers in or entering a collective then fail with UNAVAILABLE.
  // Destroy it only once every peer has finished the all-reduces it shares with this rank
  // (the coordinator releases a job's workers after all their step results are in): a
  // peer still in one fails.
  ~GlooCollective() override;

  // "gloo", or "gloo-shm" where the ranks all-reduce through shared memory.
  std::string Name() const override { return over_shm_ ? "gloo-shm" : "gloo"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // See Collective. Also INVALID_ARGUMENT for a null `data` with n > 0 or a timeout that
  // is not positive, and FAILED_PRECONDITION after an earlier error.
  absl::Status AllReduceSum(float* data, size_t n, const CollectiveOptions& options) override;
  // AllReduceSum's path on int64s (the ring's slots of its own, or the shared memory),
  // adding or taking the maximum: the same results on either path. The same errors as
  // AllReduceSum's.
  absl::Status AllReduceInt64(int64_t* data, size_t n, ReduceOp op,
                              const CollectiveOptions& options) override;
  // Through shared memory only (shm_allreduce.h: ShmAllReduce::RunBy), where the ranks
  // share a host and the segments hold `total` contributions of `align` floats; over TCP
  // CanAllReduceBy is false and AllReduceBy UNIMPLEMENTED.
  bool CanAllReduceBy(int total, size_t align) const override;
  absl::Status AllReduceBy(std::span<const float* const> local, size_t n, float* out,
                           const ChunkReduction& r, const CollectiveOptions& options) override;
  // Ends an all-reduce in flight on this rank at once (ABORTED), and every later one, and
  // shuts the connections down: peers waiting on this rank fail at once.
  void Abort(const absl::Status& why) override;

 private:
  GlooCollective(int rank, int size, std::shared_ptr<gloo_internal::TcpMesh> mesh,
                 std::unique_ptr<gloo_internal::RingAllReduce> ring,
                 std::unique_ptr<gloo_internal::RingAllReduceOf<int64_t>> ring64,
                 std::unique_ptr<gloo_internal::ShmAllReduce> shm);
  // Closes everything after an error (under mu_).
  void Fail(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status aborted();  // OK unless Abort was called
  // Runs `run` (the all-reduce `what`, its errors as Status) under mu_ with
  // AllReduceSum's checks and its handling of an error: the first one closes the
  // connections.
  absl::Status RunChecked(const std::string& what, void* data, size_t n,
                          const CollectiveOptions& options,
                          const std::function<absl::Status()>& run);

  const int rank_;
  const int size_;
  const bool over_shm_;
  const size_t shm_floats_;  // a shared-memory segment's capacity (0 over TCP)
  absl::Mutex mu_;           // held by AllReduceSum throughout
  std::shared_ptr<gloo_internal::TcpMesh> mesh_ ABSL_GUARDED_BY(mu_);        // null after an error
  std::unique_ptr<gloo_internal::RingAllReduce> ring_ ABSL_GUARDED_BY(mu_);  // on mesh_
  std::unique_ptr<gloo_internal::RingAllReduceOf<int64_t>> ring64_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<gloo_internal::ShmAllReduce> shm_ ABSL_GUARDED_BY(mu_);  // null: over TCP
  absl::Status error_ ABSL_GUARDED_BY(mu_);                                // the first error
  absl::Mutex abort_mu_;  // never held while waiting; taken under mu_, never around it
  std::shared_ptr<gloo_internal::TcpMesh> abortable_ ABSL_GUARDED_BY(abort_mu_);  // mesh_
  gloo_internal::ShmAllReduce* abortable_shm_ ABSL_GUARDED_BY(abort_mu_);         // shm_
  absl::Status aborted_ ABSL_GUARDED_BY(abort_mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_GLOO_GLOO_COLLECTIVE_H_
