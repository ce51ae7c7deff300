// Collective: the data plane's all-reduce across the N replicas of a job, c10d-style.
// Implementations (workers/gloo, workers/nccl) bind to a rendezvous at creation; options
// carry the timeout so that a dead peer is an error, never a hang.
#ifndef LOCKSTEP_CORE_COLLECTIVE_H_
#define LOCKSTEP_CORE_COLLECTIVE_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace lockstep {

struct CollectiveOptions {
  absl::Duration timeout = absl::Seconds(30);
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual std::string Name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Sums n floats (in the memory of the backend this collective was made for) across all
  // ranks, in place; every rank ends with bitwise the same result. Errors:
  // DEADLINE_EXCEEDED when a peer does not answer within options.timeout, UNAVAILABLE
  // when a peer is lost.
  virtual absl::Status AllReduceSum(float* data, size_t n, const CollectiveOptions& options) = 0;

  // Gives up on the collective: one in flight on another thread fails promptly, every
  // later one fails at once, and the peers' fail too instead of waiting out their
  // timeouts; the errors carry `why`. Thread-safe; for a job cancelled or released while
  // a step waits for a peer that will never come.
  virtual void Abort(const absl::Status& why) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_COLLECTIVE_H_
