// Clock: where a server reads the time, so that tests can set it instead of sleeping.
// Clock::Real() is the system's; ManualClock is set and advanced by a test.
//
// Thread-safe: Now() may be called from any thread, and ManualClock::Advance too.
#ifndef LOCKSTEP_SERVICES_COMMON_CLOCK_H_
#define LOCKSTEP_SERVICES_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace lockstep {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // The system's clock (absl::Now); lives for the whole process.
  static const Clock& Real();
};

// A clock that moves only when told to (tests).
class ManualClock final : public Clock {
 public:
  explicit ManualClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}
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

inline const Clock& Clock::Real() {
  class RealClock final : public Clock {
   public:
    absl::Time Now() const override { return absl::Now(); }
  };
  static const RealClock* const kReal = new RealClock();
  return *kReal;
}

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_CLOCK_H_
