// Clock: where code that measures time asks for it, so that a test can make time pass
// without sleeping. RealClock is absl::Now(); SimulatedClock stands still until a test
// advances it. Thread-safe.
#ifndef LOCKSTEP_CORE_CLOCK_H_
#define LOCKSTEP_CORE_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace lockstep {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // The process's real clock (never destroyed).
  static Clock* Real();
};

class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24 * 365 * 50))
      : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_CLOCK_H_
