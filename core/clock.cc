// Clock: where code that measures time asks for it, so that a test can make time pass without
// sleeping. Contract: clock.h.
#include "core/clock.h"

namespace lockstep {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

Clock* Clock::Real() {
  static Clock* const clock = new RealClock;
  return clock;
}

}  // namespace lockstep
