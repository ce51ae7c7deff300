// ShmAllReduce with ranks as threads (one process, one /dev/shm): the ring's bits for any
// number of ranks and any piece size, exact int64 sums and maxima, reductions by a
// function of every rank's contributions (RunBy), the fall-back when a
// rank cannot open a peer's segment, names unlinked after setup, and a peer that is gone,
// silent or aborted; and GlooCollective giving the same bits over shared memory and over
// TCP.
#include "workers/gloo/shm_allreduce.h"

#include <fcntl.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/exact_sum.h"
#include "core/store.h"
#include "core/testing.h"
#include "workers/gloo/gloo_collective.h"
#include "workers/gloo/ring_allreduce.h"

namespace lockstep::gloo_internal {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

template <typename Fn>
void OnEveryRank(int ranks, Fn fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { fn(r); });
  for (std::thread& t : threads) t.join();
}

std::vector<std::unique_ptr<ShmAllReduce>> Job(int ranks, Store* store, const std::string& prefix,
                                               size_t capacity = ShmAllReduce::kDefaultCapacity) {
  std::vector<std::unique_ptr<ShmAllReduce>> job(ranks);
  OnEveryRank(ranks, [&](int r) {
    auto made = ShmAllReduce::Create(r, ranks, store, prefix, absl::Seconds(10), capacity);
    ASSERT_TRUE(made.ok()) << made.status();
    ASSERT_NE(*made, nullptr) << "rank " << r << " fell back to TCP";
    job[r] = *std::move(made);
  });
  return job;
}

// The ring's order for element i of n (ring_allreduce.h): from rank c of its chunk on.
float RingOrderSum(const std::vector<std::vector<float>>& x, size_t i, size_t n) {
  const int ranks = static_cast<int>(x.size());
  int c = 0;
  while (RingChunkBegin(n, ranks, c + 1) <= i) ++c;
  float acc = x[c][i];
  for (int k = 1; k < ranks; ++k) acc = x[(c + k) % ranks][i] + acc;
  return acc;
}

Clock::time_point In(std::chrono::milliseconds ms) { return Clock::now() + ms; }

class ShmAllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmAllReduceTest, SumsInTheRingsOrderOnEveryRankWhateverThePieces) {
  const int ranks = GetParam();
  std::mt19937 rng(ranks);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (size_t capacity : {size_t{3}, size_t{64}, ShmAllReduce::kDefaultCapacity}) {
    MemoryStore store;
    auto job = Job(ranks, &store, absl::StrCat("shm", ranks, "-", capacity), capacity);
    ASSERT_EQ(job.size(), static_cast<size_t>(ranks));
    for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{37}, size_t{1001}}) {
      SCOPED_TRACE(absl::StrCat("n = ", n, ", pieces of ", capacity));
      std::vector<std::vector<float>> x(ranks, std::vector<float>(n));
      for (auto& v : x) {
        for (float& f : v) f = uniform(rng);
      }
      std::vector<std::vector<float>> data = x;
      std::vector<absl::Status> status(ranks);
      OnEveryRank(ranks, [&](int r) {
        status[r] = job[r]->Run(data[r].data(), n, In(std::chrono::seconds(10)));
      });
      for (int r = 0; r < ranks; ++r) ASSERT_OK(status[r]);
      for (size_t i = 0; i < n; ++i) {
        const float want = RingOrderSum(x, i, n);
        for (int r = 0; r < ranks; ++r) {
          ASSERT_EQ(data[r][i], want) << "rank " << r << ", element " << i;
        }
      }
    }
  }
}

// Int64 sums beyond double's 53 bits and maxima of mixed signs, exact on every rank, in
// pieces of half as many values as floats', between float sums on the same segments.
TEST_P(ShmAllReduceTest, ReducesInt64sExactlyBetweenFloatSums) {
  const int ranks = GetParam();
  std::mt19937_64 rng(ranks);
  for (size_t capacity : {size_t{1}, size_t{3}, size_t{64}}) {
    MemoryStore store;
    auto job = Job(ranks, &store, absl::StrCat("int64-", ranks, "-", capacity), capacity);
    ASSERT_EQ(job.size(), static_cast<size_t>(ranks));
    for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{1001}}) {
      SCOPED_TRACE(absl::StrCat("n = ", n, ", pieces of ", capacity, " floats"));
      std::vector<std::vector<int64_t>> x(ranks, std::vector<int64_t>(n));
      for (auto& v : x) {
        for (int64_t& i : v) i = static_cast<int64_t>(rng() >> 4) - (int64_t{1} << 59);
      }
      std::vector<std::vector<int64_t>> sums = x, maxima = x;
      std::vector<std::vector<float>> floats(ranks, std::vector<float>(n, 0.5f));
      std::vector<absl::Status> status(ranks);
      OnEveryRank(ranks, [&](int r) {
        const Clock::time_point deadline = In(std::chrono::seconds(10));
        status[r] = job[r]->Run(sums[r].data(), n, /*maximum=*/false, deadline);
        if (status[r].ok()) status[r] = job[r]->Run(floats[r].data(), n, deadline);
        if (status[r].ok())
          status[r] = job[r]->Run(maxima[r].data(), n, /*maximum=*/true, deadline);
      });
      for (int r = 0; r < ranks; ++r) ASSERT_OK(status[r]);
      for (size_t i = 0; i < n; ++i) {
        int64_t sum = 0, max = x[0][i];
        for (int q = 0; q < ranks; ++q) {
          sum += x[q][i];
          max = std::max(max, x[q][i]);
        }
        for (int r = 0; r < ranks; ++r) {
          ASSERT_EQ(sums[r][i], sum) << "rank " << r << ", element " << i;
          ASSERT_EQ(maxima[r][i], max) << "rank " << r << ", element " << i;
          ASSERT_EQ(floats[r][i], 0.5f * ranks) << "rank " << r << ", element " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmAllReduceTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return absl::StrCat(info.param, "Ranks"); });

TEST(ShmAllReduce, NamesAreUnlinkedOnceSetUp) {
  MemoryStore store;
  auto job = Job(2, &store, "unlinked");
  for (int r = 0; r < 2; ++r) {
    ASSERT_OK_AND_ASSIGN(std::string entry, store.Get(absl::StrCat("unlinked/shm/", r), {}));
    const std::string name = std::vector<std::string>(absl::StrSplit(entry, ' '))[0];
    EXPECT_EQ(shm_open(name.c_str(), O_RDONLY, 0), -1) << name;
    EXPECT_EQ(errno, ENOENT) << name;
  }
}

TEST(ShmAllReduce, EveryRankFallsBackWhenOneCannotOpenAPeersSegment) {
  // Rank 0 is on another host: its segment is not in this /dev/shm.
  MemoryStore store;
  ASSERT_OK(store.Set("apart/shm/0", "/lockstep-00000000000000000000000000000000 1"));
  ASSERT_OK(store.Set("apart/shm-ok/0", "0"));
  ASSERT_OK_AND_ASSIGN(auto rank1, ShmAllReduce::Create(1, 2, &store, "apart", absl::Seconds(5)));
  EXPECT_EQ(rank1, nullptr);
  EXPECT_EQ(*store.Get("apart/shm-ok/1", {}), "0");
  // A value that is no segment's name is never opened.
  ASSERT_OK(store.Set("odd/shm/0", "/dev/zero 1"));
  ASSERT_OK(store.Set("odd/shm-ok/0", "1"));
  ASSERT_OK_AND_ASSIGN(auto odd, ShmAllReduce::Create(1, 2, &store, "odd", absl::Seconds(5)));
  EXPECT_EQ(odd, nullptr);
}

TEST(ShmAllReduce, APeerThatNeverComesToSetUpIsTheStoresDeadline) {
  MemoryStore store;
  EXPECT_THAT(ShmAllReduce::Create(0, 2, &store, "alone", absl::Milliseconds(100)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("alone/shm/1")));
}

TEST(ShmAllReduce, AGonePeerIsUnavailableAtOnce) {
  MemoryStore store;
  auto job = Job(2, &store, "gone");
  job[1].reset();  // its process died: its lock is free
  std::vector<float> data(10, 1.0f);
  // UNAVAILABLE naming the gone rank: found by its free lock, not the 20 s deadline's
  // DEADLINE_EXCEEDED.
  EXPECT_THAT(job[0]->Run(data.data(), data.size(), In(std::chrono::seconds(20))),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1 is gone")));
}

TEST(ShmAllReduce, ASilentPeerIsADeadline) {
  MemoryStore store;
  auto job = Job(2, &store, "silent");
  std::vector<float> data(10, 1.0f);
  EXPECT_THAT(job[0]->Run(data.data(), data.size(), In(std::chrono::milliseconds(150))),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("rank 1")));
}

TEST(ShmAllReduce, AbortEndsTheRunInFlightAndThePeers) {
  MemoryStore store;
  auto job = Job(2, &store, "abort");
  std::vector<float> data(10, 1.0f);
  absl::Status in_flight;
  std::thread waiter(
      [&] { in_flight = job[0]->Run(data.data(), data.size(), In(std::chrono::seconds(30))); });
  // In flight (waiting for rank 1) or not yet started: either way the run ends ABORTED.
  job[0]->Abort(absl::CancelledError("job cancelled"));
  waiter.join();
  EXPECT_THAT(in_flight, StatusIs(absl::StatusCode::kAborted, HasSubstr("job cancelled")));
  EXPECT_THAT(job[1]->Run(data.data(), data.size(), In(std::chrono::seconds(30))),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 0 aborted")));
}

TEST(ShmAllReduce, GlooCollectiveGivesTheSameBitsOverSharedMemoryAndTcp) {
  const int ranks = 3;
  const size_t n = 100003;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::vector<float>> x(ranks, std::vector<float>(n));
  for (auto& v : x) {
    for (float& f : v) f = uniform(rng);
  }
  std::vector<std::vector<float>> results[2];
  for (bool shared : {false, true}) {
    MemoryStore store;
    std::vector<std::vector<float>> data = x;
    // Kept until every rank is done (see ~GlooCollective).
    std::vector<std::unique_ptr<Collective>> job(ranks);
    OnEveryRank(ranks, [&](int r) {
      GlooOptions options;
      options.hostname = "127.0.0.1";
      options.prefix = "paths";
      options.shared_memory = shared;
      auto collective = GlooCollective::Create(r, ranks, &store, options);
      ASSERT_TRUE(collective.ok()) << collective.status();
      job[r] = *std::move(collective);
      EXPECT_EQ(job[r]->Name(), shared ? "gloo-shm" : "gloo");
      EXPECT_OK(job[r]->AllReduceSum(data[r].data(), n, {}));
    });
    results[shared] = data;
  }
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(results[0][r], results[1][r]) << "rank " << r;
}

// RunBy: each rank's contributions (1 to 3 of them) meet on the rank reducing each chunk,
// in pieces of whole alignments whatever the capacity, every chunk starting at a multiple
// of the alignment; every rank ends with the reduction of all of them, here ExactSum's
// (the same bits as on one rank), the results in place over a rank's first contribution.
TEST_P(ShmAllReduceTest, ReducesByAFunctionOfEveryRanksContributions) {
  const int ranks = GetParam();
  std::vector<int> counts(ranks);
  for (int r = 0; r < ranks; ++r) counts[r] = 1 + r % 3;
  const int total = std::accumulate(counts.begin(), counts.end(), 0);
  const size_t align = 5;
  std::mt19937 rng(ranks);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 40);
  for (size_t capacity : {total * align, total * align * 3 + 2, ShmAllReduce::kDefaultCapacity}) {
    MemoryStore store;
    auto job = Job(ranks, &store, absl::StrCat("by-", ranks, "-", capacity), capacity);
    ASSERT_EQ(job.size(), static_cast<size_t>(ranks));
    for (size_t n : {size_t{1}, size_t{5}, size_t{12}, size_t{1001}}) {
      SCOPED_TRACE(absl::StrCat("n = ", n, ", capacity ", capacity));
      std::vector<std::vector<float>> c(total, std::vector<float>(n));
      for (auto& v : c) {
        for (float& f : v) f = std::ldexp(mantissa(rng), exponent(rng));
      }
      std::vector<const float*> all;
      for (const auto& v : c) all.push_back(v.data());
      std::vector<float> want(n);
      ExactSum::Reduce(total, align, all, n, want.data());
      std::atomic<bool> misaligned{false};
      ChunkReduction r{total, align,
                       [&](std::span<const float* const> in, size_t count, float* out) {
                         if (in.size() != size_t(total)) misaligned = true;
                         ExactSum::Reduce(total, align, in, count, out);
                       }};
      std::vector<std::vector<float>> mine = c;  // each rank's own copies, first one the output
      std::vector<absl::Status> status(ranks);
      OnEveryRank(ranks, [&](int rank) {
        const int first = std::accumulate(counts.begin(), counts.begin() + rank, 0);
        std::vector<const float*> local;
        for (int j = 0; j < counts[rank]; ++j) local.push_back(mine[first + j].data());
        status[rank] =
            job[rank]->RunBy(local, n, mine[first].data(), r, In(std::chrono::seconds(10)));
      });
      EXPECT_FALSE(misaligned);
      for (int rank = 0, first = 0; rank < ranks; first += counts[rank++]) {
        ASSERT_OK(status[rank]);
        ASSERT_EQ(std::memcmp(mine[first].data(), want.data(), n * sizeof(float)), 0)
            << "rank " << rank;
      }
    }
  }
}

TEST(ShmAllReduce, RunByRefusesContributionsThatDoNotAddUp) {
  MemoryStore store;
  auto job = Job(2, &store, "count");
  std::vector<float> a(10, 1.0f), b(10, 2.0f);
  const ChunkReduction r{3, 1, [](std::span<const float* const>, size_t, float*) {}};
  std::vector<absl::Status> status(2);
  OnEveryRank(2, [&](int rank) {
    std::vector<float>& x = rank == 0 ? a : b;
    const float* local[] = {x.data()};
    status[rank] = job[rank]->RunBy(local, 10, x.data(), r, In(std::chrono::seconds(10)));
  });
  for (const absl::Status& s : status) {
    EXPECT_THAT(s,
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2 contributions, not 3")));
  }
  EXPECT_FALSE(job[0]->CanRunBy(1, ShmAllReduce::kDefaultCapacity + 1));
  EXPECT_THAT(
      job[0]->RunBy(std::vector<const float*>{a.data()}, 10, a.data(),
                    {1, ShmAllReduce::kDefaultCapacity + 1, r.reduce}, In(std::chrono::seconds(1))),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not fit")));
}

}  // namespace
}  // namespace lockstep::gloo_internal
