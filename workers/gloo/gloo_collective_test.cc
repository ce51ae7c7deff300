// GlooCollective with ranks as threads on loopback, rendezvousing through a MemoryStore:
// sums, bitwise agreement across ranks, large buffers, and the failures a job must
// survive (a rank that never joins, a peer that goes away, a peer that stays silent).
#include "workers/gloo/gloo_collective.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

using Collectives = std::vector<std::unique_ptr<Collective>>;

GlooOptions Loopback(const std::string& prefix, absl::Duration timeout = absl::Seconds(5)) {
  GlooOptions options;
  options.hostname = "127.0.0.1";
  options.prefix = prefix;
  options.connect_timeout = timeout;
  return options;
}

// Calls Create for each of `ranks` (of a job of `size`) at once, one thread per rank.
std::vector<absl::StatusOr<std::unique_ptr<Collective>>> CreateRanks(const std::vector<int>& ranks,
                                                                     int size, Store* store,
                                                                     const GlooOptions& options) {
  std::vector<absl::StatusOr<std::unique_ptr<Collective>>> results(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back(
        [&, i] { results[i] = GlooCollective::Create(ranks[i], size, store, options); });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

// A whole job of `size` ranks; fails the test if any rank cannot be created.
Collectives CreateJob(int size, Store* store, const GlooOptions& options) {
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  Collectives job;
  for (auto& result : CreateRanks(ranks, size, store, options)) {
    EXPECT_TRUE(result.ok()) << result.status();
    if (result.ok()) job.push_back(*std::move(result));
  }
  return job;
}

// Runs fn(i) for every i in [0, n) at once, one thread each; returns their statuses.
std::vector<absl::Status> RunEach(size_t n, const std::function<absl::Status(size_t)>& fn) {
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) threads.emplace_back([&, i] { statuses[i] = fn(i); });
  for (std::thread& t : threads) t.join();
  return statuses;
}

// All-reduces data[rank] on every rank of `job` at once.
std::vector<absl::Status> AllReduceAll(Collectives& job, std::vector<std::vector<float>>& data,
                                       absl::Duration timeout = absl::Seconds(5)) {
  return RunEach(job.size(), [&](size_t r) {
    return job[r]->AllReduceSum(data[r].data(), data[r].size(), {.timeout = timeout});
  });
}

class GlooAllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooAllReduceTest, SumsIntegersExactly) {
  const int size = GetParam();
  MemoryStore store;
  Collectives job = CreateJob(size, &store, Loopback("exact"));
  ASSERT_EQ(job.size(), size);
  const size_t n = 10007;  // not a multiple of the ring's segment count
  std::vector<std::vector<float>> data(size, std::vector<float>(n));
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < n; ++i) data[r][i] = float((r + 1) * int(i % 1000) - 7 * r);
  }
  for (const absl::Status& s : AllReduceAll(job, data)) ASSERT_OK(s);
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(job[r]->rank(), r);
    EXPECT_EQ(job[r]->size(), size);
    for (size_t i = 0; i < n; ++i) {
      float expected = 0;
      for (int q = 0; q < size; ++q) expected += float((q + 1) * int(i % 1000) - 7 * q);
      ASSERT_EQ(data[r][i], expected) << "rank " << r << " element " << i;
    }
  }
}

TEST_P(GlooAllReduceTest, EveryRankEndsBitwiseIdentical) {
  const int size = GetParam();
  MemoryStore store;
  Collectives job = CreateJob(size, &store, Loopback("bitwise"));
  ASSERT_EQ(job.size(), size);
  // Magnitudes spread over 12 decades, so that the order of the additions shows in the
  // last bits: ranks that summed in different orders would disagree.
  const size_t n = 100003;
  std::vector<std::vector<float>> data(size, std::vector<float>(n));
  std::vector<double> exact(n, 0.0);
  for (int r = 0; r < size; ++r) {
    std::mt19937 gen(1234 + r);
    std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-6, 6);
    for (size_t i = 0; i < n; ++i) {
      data[r][i] = std::ldexp(mantissa(gen), 2 * exponent(gen));
      exact[i] += data[r][i];
    }
  }
  for (int round = 0; round < 2; ++round) {  // and the collective can be used again
    for (const absl::Status& s : AllReduceAll(job, data)) ASSERT_OK(s);
    for (int r = 1; r < size; ++r) {
      ASSERT_EQ(std::memcmp(data[r].data(), data[0].data(), n * sizeof(float)), 0)
          << "rank " << r << " differs from rank 0 in round " << round;
    }
    if (round == 0) {
      for (size_t i = 0; i < n; ++i) {
        ASSERT_NEAR(data[0][i], exact[i], 1e-5 * (std::fabs(exact[i]) + 4096.0)) << i;
      }
    }
  }
}

// The integer reductions: sums beyond float's and double's 53 bits, maxima with negative
// values, queued behind a started float all-reduce in the one FIFO; over TCP (ranks on
// several hosts) and through shared memory (ranks on one).
void ReduceInt64sExactlyInTheFifo(int size, bool shared_memory) {
  MemoryStore store;
  GlooOptions options = Loopback("int64");
  options.shared_memory = shared_memory;
  Collectives job = CreateJob(size, &store, options);
  ASSERT_EQ(job.size(), size);
  EXPECT_EQ(job[0]->Name(), shared_memory ? "gloo-shm" : "gloo");
  const size_t n = 5003;
  auto value = [](int r, size_t i) {
    return (int64_t{1} << 60) / 8 + int64_t(i) * 1000003 - int64_t(r) * 77 - (i % 3 == 0 ? r : 0);
  };
  std::vector<std::vector<float>> floats(size, std::vector<float>(n, 1.0f));
  std::vector<std::vector<int64_t>> sums(size, std::vector<int64_t>(n));
  std::vector<std::vector<int64_t>> maxima(size, std::vector<int64_t>(n));
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < n; ++i) {
      sums[r][i] = value(r, i);
      maxima[r][i] = (i % 2 == 0 ? -1 : 1) * value((r + int(i)) % size, i);
    }
  }
  for (const absl::Status& s : RunEach(job.size(), [&](size_t r) -> absl::Status {
         absl::StatusOr<CollectiveTicket> t =
             job[r]->StartAllReduceSum(floats[r].data(), n, {.timeout = absl::Seconds(5)});
         if (!t.ok()) return t.status();
         absl::Status sum = job[r]->AllReduceInt64(sums[r].data(), n, ReduceOp::kSum, {});
         if (!sum.ok()) return sum;
         absl::Status max = job[r]->AllReduceInt64(maxima[r].data(), n, ReduceOp::kMax, {});
         if (!max.ok()) return max;
         return job[r]->Wait(*t);
       })) {
    ASSERT_OK(s);
  }
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < n; ++i) {
      int64_t sum = 0, max = std::numeric_limits<int64_t>::min();
      for (int q = 0; q < size; ++q) {
        sum += value(q, i);
        max = std::max(max, (i % 2 == 0 ? -1 : 1) * value((q + int(i)) % size, i));
      }
      ASSERT_EQ(sums[r][i], sum) << "rank " << r << " element " << i;
      ASSERT_EQ(maxima[r][i], max) << "rank " << r << " element " << i;
      ASSERT_EQ(floats[r][i], float(size));
    }
  }
}

TEST_P(GlooAllReduceTest, ReducesInt64sExactlyInTheFifo) {
  for (const bool shared_memory : {false, true}) {
    SCOPED_TRACE(shared_memory ? "shared memory" : "TCP");
    ReduceInt64sExactlyInTheFifo(GetParam(), shared_memory);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooAllReduceTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return absl::StrCat(info.param, "Ranks"); });

TEST(GlooCollectiveTest, LargeBuffers) {
  MemoryStore store;
  Collectives job = CreateJob(3, &store, Loopback("large"));
  ASSERT_EQ(job.size(), 3);
  for (size_t n : {size_t{824458}, size_t{1} << 20}) {  // the CNN's gradient; 1M floats
    std::vector<std::vector<float>> data(3, std::vector<float>(n));
    for (int r = 0; r < 3; ++r) {
      for (size_t i = 0; i < n; ++i) data[r][i] = float(int(i % 4093) + 100 * r);
    }
    for (const absl::Status& s : AllReduceAll(job, data)) ASSERT_OK(s);
    for (int r = 0; r < 3; ++r) {
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(data[r][i], float(3 * int(i % 4093) + 300)) << "n " << n << " i " << i;
      }
    }
  }
}

TEST(GlooCollectiveTest, SingleRankIsIdentity) {
  MemoryStore store;
  Collectives job = CreateJob(1, &store, Loopback("single"));
  ASSERT_EQ(job.size(), 1);
  std::vector<float> data = {1.5f, -2.0f, 3.25f};
  ASSERT_OK(job[0]->AllReduceSum(data.data(), data.size(), {}));
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_EQ(job[0]->Name(), "gloo");
}

TEST(GlooCollectiveTest, JobsSharingAStoreStayApart) {
  MemoryStore store;
  std::vector<Collectives> jobs(2);
  std::thread a([&] { jobs[0] = CreateJob(2, &store, Loopback("job-a/attempt-0")); });
  std::thread b([&] { jobs[1] = CreateJob(2, &store, Loopback("job-b/attempt-0")); });
  a.join();
  b.join();
  ASSERT_EQ(jobs[0].size(), 2);
  ASSERT_EQ(jobs[1].size(), 2);
  std::vector<std::vector<std::vector<float>>> data = {{{1}, {2}}, {{10}, {20}}};
  std::thread ra([&] {
    for (auto& s : AllReduceAll(jobs[0], data[0])) EXPECT_OK(s);
  });
  std::thread rb([&] {
    for (auto& s : AllReduceAll(jobs[1], data[1])) EXPECT_OK(s);
  });
  ra.join();
  rb.join();
  EXPECT_EQ(data[0][0][0], 3);
  EXPECT_EQ(data[0][1][0], 3);
  EXPECT_EQ(data[1][0][0], 30);
  EXPECT_EQ(data[1][1][0], 30);
}

TEST(GlooCollectiveTest, MissingRankFailsCreateWithinConnectTimeout) {
  MemoryStore store;
  const absl::Time start = absl::Now();
  // Rank 2 of 3 never shows up.
  auto results = CreateRanks({0, 1}, 3, &store, Loopback("missing", absl::Seconds(1)));
  const absl::Duration elapsed = absl::Now() - start;
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(results[r],
                StatusIs(absl::StatusCode::kDeadlineExceeded,
                         AllOf(HasSubstr(absl::StrCat("gloo rank ", r, " of 3")),
                               HasSubstr("connect full mesh"), HasSubstr("missing/0/2"))));
  }
  EXPECT_GE(elapsed, absl::Milliseconds(900));
  EXPECT_LT(elapsed, absl::Seconds(3));
}

TEST(GlooCollectiveTest, StaleAddressFailsCreateWithinConnectTimeout) {
  // The peer's keys hold the address of a rank that is gone (an earlier attempt's, say):
  // the rank finds them at once, but nobody answers there. The lower rank of a pair
  // connects, so this tries both ranks (twice each): rank 0's connect is refused at once;
  // rank 1, which only listens, waits out the connect timeout.
  MemoryStore store;
  {
    Collectives earlier = CreateJob(2, &store, Loopback("earlier"));
    ASSERT_EQ(earlier.size(), 2);
  }
  const absl::Duration connect_timeout = absl::Milliseconds(500);
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int rank = attempt % 2;
    const std::string prefix = absl::StrCat("stale-", attempt);
    // The peer's keys of bootstrap attempt 0: its address and its pairing nonce.
    for (const std::string& key : {absl::StrCat(1 - rank), absl::StrCat("nonce/", 1 - rank)}) {
      ASSERT_OK_AND_ASSIGN(std::string value,
                           store.Get(absl::StrCat("earlier/0/", key), absl::ZeroDuration()));
      ASSERT_OK(store.Set(absl::StrCat(prefix, "/0/", key), value));
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<Collective>> result =
        GlooCollective::Create(rank, 2, &store, Loopback(prefix, connect_timeout));
    const absl::Duration elapsed = absl::Now() - start;
    ASSERT_FALSE(result.ok());
    EXPECT_THAT(result.status().code(),
                AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded))
        << result.status();
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("connect full mesh"));
    EXPECT_LT(elapsed, connect_timeout + absl::Seconds(1)) << result.status();
  }
}

TEST(GlooCollectiveTest, LostPeerFailsEverySurvivorPromptly) {
  MemoryStore store;
  Collectives job = CreateJob(4, &store, Loopback("lost"));
  ASSERT_EQ(job.size(), 4);
  std::vector<std::vector<float>> data(4, std::vector<float>(65536, 1.0f));
  for (const absl::Status& s : AllReduceAll(job, data)) ASSERT_OK(s);

  // Rank 2 goes away: its connections close. In the ring, rank 0 exchanges data with
  // ranks 1 and 3 only; it learns of the loss promptly only because ranks 1 and 3 close
  // their own connections when they fail.
  job[2].reset();
  const std::vector<size_t> survivors = {0, 1, 3};
  const absl::Duration timeout = absl::Seconds(20);
  const absl::Time start = absl::Now();
  std::vector<absl::Status> statuses = RunEach(survivors.size(), [&](size_t i) {
    const size_t r = survivors[i];
    return job[r]->AllReduceSum(data[r].data(), data[r].size(), {.timeout = timeout});
  });
  const absl::Duration elapsed = absl::Now() - start;
  for (size_t i = 0; i < survivors.size(); ++i) {
    EXPECT_THAT(statuses[i],
                StatusIs(absl::StatusCode::kUnavailable,
                         HasSubstr(absl::StrCat("gloo rank ", survivors[i], " of 4: all-reduce"))));
  }
  EXPECT_LT(elapsed, absl::Seconds(5)) << "survivors waited out (part of) their timeout";
  // The collective is spent; later calls say so without touching the network.
  EXPECT_THAT(job[0]->AllReduceSum(data[0].data(), data[0].size(), {}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("earlier error")));
}

TEST(GlooCollectiveTest, SilentPeerTimesOutAndThenLearnsOfTheFailure) {
  MemoryStore store;
  Collectives job = CreateJob(2, &store, Loopback("silent"));
  ASSERT_EQ(job.size(), 2);
  std::vector<float> data(1000, 1.0f);
  // Rank 1 is alive but never enters the all-reduce.
  absl::Time start = absl::Now();
  EXPECT_THAT(job[0]->AllReduceSum(data.data(), data.size(), {.timeout = absl::Milliseconds(300)}),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("gloo rank 0 of 2")));
  absl::Duration elapsed = absl::Now() - start;
  EXPECT_GE(elapsed, absl::Milliseconds(290));
  EXPECT_LT(elapsed, absl::Seconds(2));
  // Rank 0 closed its connections when it failed, so rank 1 fails at once, not in 20 s.
  start = absl::Now();
  EXPECT_THAT(job[1]->AllReduceSum(data.data(), data.size(), {.timeout = absl::Seconds(20)}),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("gloo rank 1 of 2")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(GlooCollectiveTest, RejectsBadArguments) {
  MemoryStore store;
  const GlooOptions options = Loopback("bad");
  EXPECT_THAT(GlooCollective::Create(2, 2, &store, options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2")));
  EXPECT_THAT(GlooCollective::Create(0, 0, &store, options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("size 0")));
  EXPECT_THAT(GlooCollective::Create(0, 1, nullptr, options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("store")));
  GlooOptions both = options;
  both.interface = "lo";
  EXPECT_THAT(GlooCollective::Create(0, 1, &store, both),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("GlooOptions.interface")));
  GlooOptions no_time = options;
  no_time.connect_timeout = absl::ZeroDuration();
  EXPECT_THAT(GlooCollective::Create(0, 1, &store, no_time),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("connect_timeout")));
  GlooOptions unbindable = options;
  unbindable.hostname = "no-such-host.invalid";
  EXPECT_THAT(GlooCollective::Create(0, 1, &store, unbindable),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("GlooOptions.hostname \"no-such-host.invalid\"")));
  GlooOptions foreign = options;
  foreign.hostname = "192.0.2.1";  // TEST-NET-1: resolves, but is no address of this host
  EXPECT_THAT(GlooCollective::Create(0, 1, &store, foreign),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("GlooOptions.hostname \"192.0.2.1\"")));
  GlooOptions no_iface = options;
  no_iface.hostname.clear();
  no_iface.interface = "nosuchif0";
  EXPECT_THAT(GlooCollective::Create(0, 1, &store, no_iface),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("GlooOptions.interface \"nosuchif0\"")));

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Collective> single,
                       GlooCollective::Create(0, 1, &store, options));
  EXPECT_THAT(single->AllReduceSum(nullptr, 4, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null data")));
  float x = 1;
  EXPECT_THAT(single->AllReduceSum(&x, 1, {.timeout = absl::ZeroDuration()}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("timeout")));
  EXPECT_OK(single->AllReduceSum(nullptr, 0, {}));  // nothing to do
}

TEST(GlooCollectiveTest, InterfaceOptionBindsThatInterface) {
  MemoryStore store;
  GlooOptions options = Loopback("iface");
  options.hostname.clear();
  options.interface = "lo";
  Collectives job = CreateJob(2, &store, options);
  ASSERT_EQ(job.size(), 2);
  std::vector<std::vector<float>> data = {{1, 2}, {3, 4}};
  for (const absl::Status& s : AllReduceAll(job, data)) ASSERT_OK(s);
  EXPECT_EQ(data[1], (std::vector<float>{4, 6}));
}

TEST(GlooCollectiveTest, AbortEndsAPeersWaitAndEveryLaterCall) {
  MemoryStore store;
  Collectives job = CreateJob(2, &store, Loopback("abort"));
  ASSERT_EQ(job.size(), 2);
  std::vector<float> data(1000, 1.0f);
  // Rank 0 waits in an all-reduce that rank 1 will never join; rank 1 is aborted (a job
  // released while its step waits for a peer). Whichever happens first, rank 0's wait
  // ends at once, not at its 20 s timeout.
  const absl::Time start = absl::Now();
  std::thread waiter([&] {
    EXPECT_THAT(job[0]->AllReduceSum(data.data(), data.size(), {.timeout = absl::Seconds(20)}),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr("gloo rank 0 of 2")));
  });
  job[1]->Abort(absl::CancelledError("job job-7 was released"));
  waiter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(job[1]->AllReduceSum(data.data(), data.size(), {}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("job job-7 was released")));
  job[1]->Abort(absl::CancelledError("again"));  // idempotent
}

// A peer stopped mid-step (SIGSTOP) closes nothing, so an all-reduce waiting on it over
// TCP is woken only by its own rank's Abort: a job handing its state over to a resize must
// not wait out the step's timeout first (its new group's rendezvous would time out meanwhile).
TEST(GlooCollectiveTest, AbortEndsThisRanksOwnWaitOverTcpAtOnce) {
  for (const bool int64 : {true, false}) {
    SCOPED_TRACE(int64 ? "int64 sum" : "float sum over TCP");
    bool seen_in_flight = false;
    for (int attempt = 0; attempt < 50 && !seen_in_flight; ++attempt) {
      MemoryStore store;
      GlooOptions options = Loopback(absl::StrCat("abort-own-", int64, "-", attempt));
      options.shared_memory = false;
      Collectives job = CreateJob(2, &store, options);
      ASSERT_EQ(job.size(), 2);
      std::vector<int64_t> ints(50000, 1);
      std::vector<float> floats(50000, 1.0f);
      // Rank 1 never joins (stopped); rank 0 is aborted as soon as its call has begun.
      std::atomic<bool> calling = false;
      absl::Status status;
      const absl::Time start = absl::Now();
      std::thread waiter([&] {
        calling = true;
        const CollectiveOptions timeout = {.timeout = absl::Seconds(20)};
        status = int64 ? job[0]->AllReduceInt64(ints.data(), ints.size(), ReduceOp::kSum, timeout)
                       : job[0]->AllReduceSum(floats.data(), floats.size(), timeout);
      });
      while (!calling) std::this_thread::yield();
      job[0]->Abort(absl::CancelledError("replaced by job-8"));
      waiter.join();
      ASSERT_LT(absl::Now() - start, absl::Seconds(5)) << status;
      // Aborted in flight (ABORTED), or before the call checked (FAILED_PRECONDITION): the
      // loop goes on until the first has been seen.
      ASSERT_THAT(
          status,
          AnyOf(StatusIs(absl::StatusCode::kAborted, HasSubstr("replaced by job-8")),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("replaced by job-8"))));
      seen_in_flight = status.code() == absl::StatusCode::kAborted;
    }
    EXPECT_TRUE(seen_in_flight) << "no attempt aborted a call in flight";
  }
}

TEST(GlooCollectiveTest, AnAddressIsRequired) {
  MemoryStore store;
  GlooOptions options = Loopback("none");
  options.hostname.clear();
  EXPECT_THAT(GlooCollective::Create(0, 1, &store, options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("set exactly one of GlooOptions.hostname")));
}

}  // namespace
}  // namespace lockstep
