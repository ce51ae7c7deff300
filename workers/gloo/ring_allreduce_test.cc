// RingAllReduce on real meshes (ranks as threads on loopback, Lockstep's bootstrap),
// with tiny segments so that a few floats cross many segments and wrap the inbox window:
// odd sizes, sizes below the ring's size, each element summed in the documented order;
// and GlooCollective's started all-reduces over adjacent buckets of one buffer.
#include "workers/gloo/ring_allreduce.h"

#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/store.h"
#include "core/testing.h"
#include "workers/gloo/gloo_bootstrap.h"
#include "workers/gloo/gloo_collective.h"

namespace lockstep::gloo_internal {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

GlooOptions Loopback(const std::string& prefix) {
  GlooOptions options;
  options.hostname = "127.0.0.1";
  options.prefix = prefix;
  options.connect_timeout = absl::Seconds(10);
  return options;
}

// Runs fn(r) for every rank r at once, one thread each.
template <typename Fn>
void OnEveryRank(int ranks, Fn fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { fn(r); });
  for (std::thread& t : threads) t.join();
}

// A ring per rank of a job of `ranks`, segments of `segment_bytes`.
std::vector<std::unique_ptr<RingAllReduce>> Rings(int ranks, size_t segment_bytes,
                                                  const std::string& prefix, Store* store) {
  std::vector<std::unique_ptr<RingAllReduce>> rings(ranks);
  OnEveryRank(ranks, [&](int r) {
    absl::StatusOr<std::shared_ptr<TcpMesh>> mesh = Bootstrap(r, ranks, store, Loopback(prefix));
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    rings[r] = std::make_unique<RingAllReduce>(*mesh, segment_bytes);
  });
  return rings;
}

// What the ring computes for element i of n: chunk c (of `ranks` nearly equal chunks, the
// first n % ranks one longer) summed from rank c on, acc = x[c+k] + acc for k = 1..ranks-1.
float RingOrderSum(const std::vector<std::vector<float>>& x, size_t i, size_t n) {
  const int ranks = static_cast<int>(x.size());
  int c = 0;
  while (n / ranks * (c + 1) + std::min<size_t>(c + 1, n % ranks) <= i) ++c;
  float acc = x[c][i];
  for (int k = 1; k < ranks; ++k) acc = x[(c + k) % ranks][i] + acc;
  return acc;
}

class RingAllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(RingAllReduceTest, SumsOddSizesInTheRingsOrderOnEveryRank) {
  const int ranks = GetParam();
  MemoryStore store;
  // 8-byte segments: 2 floats each, so that 37 floats make dozens of messages and wrap
  // the inbox window many times.
  auto rings = Rings(ranks, 8, absl::StrCat("ring", ranks), &store);
  ASSERT_EQ(rings.size(), static_cast<size_t>(ranks));
  std::mt19937 rng(ranks);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{37}, size_t{1001}}) {
    SCOPED_TRACE(absl::StrCat("n = ", n));
    std::vector<std::vector<float>> x(ranks, std::vector<float>(n));
    for (auto& v : x) {
      for (float& f : v) f = uniform(rng);
    }
    std::vector<std::vector<float>> data = x;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    OnEveryRank(ranks, [&](int r) { ASSERT_OK(rings[r]->Run(data[r].data(), n, deadline)); });
    for (size_t i = 0; i < n; ++i) {
      const float want = RingOrderSum(x, i, n);
      for (int r = 0; r < ranks; ++r) {
        // Bitwise: the same float, summed in the same order, on every rank.
        ASSERT_EQ(data[r][i], want) << "rank " << r << ", element " << i;
      }
    }
  }
}

// The int64 ring (ExactSum's sums and maxima) on the same contexts as the float ring,
// calls of the two alternating: each reduces exactly on its own slots, large values
// included.
TEST_P(RingAllReduceTest, Int64RingSumsExactlyBesideTheFloatRing) {
  const int ranks = GetParam();
  MemoryStore store;
  std::vector<std::unique_ptr<RingAllReduce>> floats(ranks);
  std::vector<std::unique_ptr<RingAllReduceOf<int64_t>>> ints(ranks);
  OnEveryRank(ranks, [&](int r) {
    absl::StatusOr<std::shared_ptr<TcpMesh>> mesh =
        Bootstrap(r, ranks, &store, Loopback("int64_ring"));
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    floats[r] = std::make_unique<RingAllReduce>(*mesh, 64);
    ints[r] = std::make_unique<RingAllReduceOf<int64_t>>(*mesh, 64);
  });
  auto value = [](int r, size_t i) {
    return (int64_t{1} << 58) + int64_t(i) * 7919 - int64_t(r) * 104729;
  };
  for (size_t n : {size_t{1}, size_t{5}, size_t{1001}, size_t{200003}}) {
    std::vector<std::vector<int64_t>> x(ranks, std::vector<int64_t>(n));
    std::vector<std::vector<float>> f(ranks, std::vector<float>(n, 1.0f));
    for (int r = 0; r < ranks; ++r) {
      for (size_t i = 0; i < n; ++i) x[r][i] = value(r, i);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::vector<std::vector<int64_t>> m(ranks, std::vector<int64_t>(n));
    for (int r = 0; r < ranks; ++r) {
      for (size_t i = 0; i < n; ++i) m[r][i] = -value((r + int(i)) % ranks, i);
    }
    OnEveryRank(ranks, [&](int r) {
      ASSERT_OK(floats[r]->Run(f[r].data(), n, deadline));
      ASSERT_OK(ints[r]->Run(x[r].data(), n, deadline));
      ASSERT_OK(ints[r]->Run(m[r].data(), n, deadline, /*maximum=*/true));
      ASSERT_OK(floats[r]->Run(f[r].data(), n, deadline));
    });
    for (int r = 0; r < ranks; ++r) {
      for (size_t i = 0; i < n; ++i) {
        int64_t want = 0;
        for (int q = 0; q < ranks; ++q) want += value(q, i);
        ASSERT_EQ(x[r][i], want) << "n " << n << " rank " << r << " element " << i;
        ASSERT_EQ(m[r][i],
                  -value(0, i) > -value(ranks - 1, i) ? -value(0, i) : -value(ranks - 1, i))
            << "max, n " << n << " rank " << r << " element " << i;
        ASSERT_EQ(f[r][i], float(ranks * ranks)) << "n " << n << " rank " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, RingAllReduceTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return absl::StrCat(info.param, "Ranks"); });

TEST(RingAllReduceTest, TwoRanksSumExactlyWhateverTheSegmentsAndThePath) {
  // For 2 ranks every element is a + b on both ranks, the bits of one float addition:
  // neither the segment size nor the path (the exchange up to kExchangeMaxBytes, the ring
  // above) can change them.
  struct Case {
    size_t n, segment_bytes;
  };
  const size_t ring_n = RingAllReduce::kExchangeMaxBytes / sizeof(float) + 3;
  const Case cases[] = {{4099, 4},
                        {4099, 60},
                        {4099, size_t{1} << 20},
                        {ring_n, 4096},
                        {ring_n, RingAllReduce::kDefaultSegmentBytes}};
  MemoryStore store;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat("n = ", c.n, ", segments of ", c.segment_bytes, " bytes"));
    std::vector<std::vector<float>> x(2, std::vector<float>(c.n));
    for (auto& v : x) {
      for (float& f : v) f = uniform(rng);
    }
    auto rings = Rings(2, c.segment_bytes, absl::StrCat("two", c.n, "-", c.segment_bytes), &store);
    ASSERT_EQ(rings.size(), 2u);
    std::vector<std::vector<float>> data = x;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    OnEveryRank(2, [&](int r) { ASSERT_OK(rings[r]->Run(data[r].data(), c.n, deadline)); });
    for (size_t i = 0; i < c.n; ++i) {
      ASSERT_EQ(data[0][i], x[0][i] + x[1][i]) << "element " << i;
      ASSERT_EQ(data[1][i], x[0][i] + x[1][i]) << "element " << i;
    }
  }
}

TEST(RingAllReduceTest, AdjacentBucketsOfOneBufferEachSumToThePlainSum) {
  // A step's buckets: started all-reduces over adjacent ranges of one gradient buffer, of
  // odd sizes, straddling the default segment size; integer values sum exactly.
  const int ranks = 3;
  const std::vector<size_t> buckets = {1, RingAllReduce::kDefaultSegmentBytes / 4 + 1, 7,
                                       3 * RingAllReduce::kDefaultSegmentBytes / 4 - 1, 2};
  size_t n = 0;
  for (size_t b : buckets) n += b;
  MemoryStore store;
  std::vector<std::unique_ptr<Collective>> job(ranks);
  OnEveryRank(ranks, [&](int r) {
    auto collective = GlooCollective::Create(r, ranks, &store, Loopback("buckets"));
    ASSERT_TRUE(collective.ok()) << collective.status();
    job[r] = *std::move(collective);
  });
  std::vector<std::vector<float>> data(ranks, std::vector<float>(n));
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < n; ++i) data[r][i] = static_cast<float>((i * 7 + r * 13) % 1000);
  }
  std::vector<absl::Status> waited(ranks);
  OnEveryRank(ranks, [&](int r) {
    ASSERT_NE(job[r], nullptr);
    size_t offset = n;  // backward's order: the last bucket first
    CollectiveTicket last = 0;
    for (auto b = buckets.rbegin(); b != buckets.rend(); ++b) {
      offset -= *b;
      absl::StatusOr<CollectiveTicket> t =
          job[r]->StartAllReduceSum(data[r].data() + offset, *b, {});
      ASSERT_TRUE(t.ok()) << t.status();
      last = *t;
    }
    waited[r] = job[r]->Wait(last);
  });
  for (int r = 0; r < ranks; ++r) {
    ASSERT_TRUE(waited[r].ok()) << waited[r];
    for (size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int k = 0; k < ranks; ++k) want += static_cast<float>((i * 7 + k * 13) % 1000);
      ASSERT_EQ(data[r][i], want) << "rank " << r << ", element " << i;
    }
  }
}

TEST(RingAllReduceTest, APeerThatNeverComesIsADeadlineWithinTheTimeout) {
  MemoryStore store;
  std::vector<std::unique_ptr<Collective>> job(2);
  OnEveryRank(2, [&](int r) {
    auto collective = GlooCollective::Create(r, 2, &store, Loopback("silent"));
    ASSERT_TRUE(collective.ok()) << collective.status();
    job[r] = *std::move(collective);
  });
  ASSERT_NE(job[0], nullptr);
  std::vector<float> data(100000, 1.0f);  // several segments
  // The call's own 200 ms bound is what ends it (its error names it), not a longer one.
  EXPECT_THAT(job[0]->AllReduceSum(data.data(), data.size(), {.timeout = absl::Milliseconds(200)}),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("all-reduce of 100000"),
                             HasSubstr("(CollectiveOptions.timeout 200ms)"))));
}

}  // namespace
}  // namespace lockstep::gloo_internal
