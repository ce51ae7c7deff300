// The Gloo-facing Store adapter and the exception-to-status mapping, without a network.
#include "workers/gloo/gloo_store.h"

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/testing.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/rendezvous/prefix_store.h"
#include "workers/gloo/gloo_status.h"

namespace lockstep::gloo_internal {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

#define EXPECT_OK(expr) EXPECT_TRUE((expr).ok()) << (expr)

// The status a call to `fn` throws as StoreError; OK when it throws nothing.
template <typename Fn>
absl::Status StoreErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const StoreError& e) {
    return e.status();
  }
  return absl::OkStatus();
}

// A store whose backend is down: every call fails with UNAVAILABLE.
class DownStore final : public Store {
 public:
  absl::Status Set(const std::string& key, const std::string&) override {
    return absl::UnavailableError("store down setting " + key);
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration) override {
    return absl::UnavailableError("store down getting " + key);
  }
};

// A MemoryStore that records the timeout of every Get and notifies when the first starts.
class RecordingStore final : public Store {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    return memory_.Set(key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    {
      absl::MutexLock lock(&mu_);
      timeouts_.push_back(timeout);
      if (!waiting.HasBeenNotified()) waiting.Notify();
    }
    return memory_.Get(key, timeout);
  }
  std::vector<absl::Duration> timeouts() {
    absl::MutexLock lock(&mu_);
    return timeouts_;
  }
  absl::Notification waiting;

 private:
  MemoryStore memory_;
  absl::Mutex mu_;
  std::vector<absl::Duration> timeouts_ ABSL_GUARDED_BY(mu_);
};

TEST(GlooStoreTest, RoundTripsBinaryValues) {
  MemoryStore store;
  GlooStore adapter(&store, absl::Now() + absl::Seconds(5));
  const std::vector<char> value = {'a', '\0', '\xff', 'z'};
  adapter.set("k", value);
  adapter.wait({"k"}, std::chrono::milliseconds(100));
  EXPECT_EQ(adapter.get("k"), value);
  ASSERT_OK_AND_ASSIGN(std::string raw, store.Get("k", absl::ZeroDuration()));
  EXPECT_EQ(raw, std::string("a\0\xffz", 4));
}

TEST(GlooStoreTest, PrefixStoreNamespacesKeys) {
  MemoryStore store;
  GlooStore adapter(&store, absl::Now() + absl::Seconds(5));
  gloo::rendezvous::PrefixStore job_a("job-a", adapter);
  job_a.set("0", {'x'});
  ASSERT_OK_AND_ASSIGN(std::string raw, store.Get("job-a/0", absl::ZeroDuration()));
  EXPECT_EQ(raw, "x");
  EXPECT_THAT(store.Get("0", absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("0")));
}

TEST(GlooStoreTest, DeadlineBoundsWaitsWhateverGlooAsks) {
  RecordingStore store;
  ASSERT_OK(store.Set("here", "1"));
  GlooStore adapter(&store, absl::Now() + absl::Milliseconds(300));
  const absl::Time start = absl::Now();
  // Gloo's longer timeout does not extend the deadline: the store is asked to wait until
  // the deadline at most, never Gloo's 30 s...
  EXPECT_THAT(StoreErrorOf([&] {
                adapter.wait({"here", "absent"}, std::chrono::seconds(30));
              }),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("absent")));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(290));
  // ...and once it has passed, waits and gets fail at once: the store is asked not to wait.
  EXPECT_THAT(StoreErrorOf([&] { adapter.get("absent"); }),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("absent")));
  const std::vector<absl::Duration> timeouts = store.timeouts();
  ASSERT_EQ(timeouts.size(), 3u);  // "here", "absent", "absent" again
  EXPECT_LE(timeouts[0], absl::Milliseconds(300));
  EXPECT_LE(timeouts[1], absl::Milliseconds(300));
  EXPECT_LE(timeouts[2], absl::Milliseconds(10));  // zero, but for a timer's early wake-up
}

TEST(GlooStoreTest, WaitOutlastsGloosShorterTimeoutUntilTheDeadline) {
  // Gloo passes its context timeout (a fifth of the connect timeout); the adapter asks the
  // store to wait until its own deadline instead, so that a peer showing up after Gloo's
  // timeout is still waited for. The peer sets its key once the wait has reached the
  // store (no sleep: whether the key lands before or during the store's wait, the
  // timeout the store was given is what decides).
  RecordingStore store;
  GlooStore adapter(&store, absl::Now() + absl::Seconds(10));
  std::thread late_peer([&] {
    ASSERT_TRUE(store.waiting.WaitForNotificationWithTimeout(absl::Seconds(10)));
    ASSERT_OK(store.Set("late", "v"));
  });
  EXPECT_NO_THROW(adapter.wait({"late"}, std::chrono::milliseconds(50)));
  late_peer.join();
  EXPECT_EQ(adapter.get("late"), std::vector<char>{'v'});
  const std::vector<absl::Duration> timeouts = store.timeouts();
  ASSERT_EQ(timeouts.size(), 1u);  // get() after wait() is served from the adapter's cache
  EXPECT_GT(timeouts[0], absl::Seconds(9));
  EXPECT_LE(timeouts[0], absl::Seconds(10));
}

TEST(GlooStoreTest, StoreErrorsKeepTheirCode) {
  DownStore store;
  GlooStore adapter(&store, absl::Now() + absl::Seconds(5));
  EXPECT_THAT(StoreErrorOf([&] { adapter.set("k", {'v'}); }),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("setting k")));
  EXPECT_THAT(StoreErrorOf([&] { adapter.wait({"k"}); }),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("getting k")));
}

TEST(GlooStatusTest, MapsWhatGlooThrows) {
  const std::string what = "gloo rank 1 of 2: all-reduce of 8 floats";
  auto map = [&](auto thrower) { return CallGloo(what, thrower); };
  EXPECT_OK(map([] {}));
  EXPECT_THAT(map([] { throw gloo::IoException("[pair.cc:1] Timed out waiting 300ms for recv"); }),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr(what + ": [pair.cc:1] Timed out waiting")));
  EXPECT_THAT(map([] { throw gloo::IoException("[pair.cc:1] Read timeout [127.0.0.1]:1"); }),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("Read timeout")));
  EXPECT_THAT(map([] { throw gloo::IoException("[pair.cc:1] Connection closed by peer"); }),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("closed by peer")));
  EXPECT_THAT(map([] { throw gloo::EnforceNotMet("f.cc", 3, "n > 0", "bad n"); }),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("gloo invariant")));
  EXPECT_THAT(map([] { throw gloo::InvalidOperationException("no such op"); }),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("no such op")));
  EXPECT_THAT(map([] { throw std::runtime_error("boom"); }),
              StatusIs(absl::StatusCode::kInternal, HasSubstr(what + ": boom")));
  EXPECT_THAT(map([] { throw 42; }),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("unknown exception")));
  EXPECT_THAT(map([] { throw StoreError(absl::UnavailableError("store down")); }),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(what + ": store down")));
}

}  // namespace
}  // namespace lockstep::gloo_internal
