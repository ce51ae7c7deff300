// ExactSum across ranks (threads over the CPU collective on loopback, a MemoryStore): the same V =
// 4 contributions held by 1, 2 (evenly and unevenly) and 4 ranks, in permuted orders, give bitwise
// the same sum on every rank, where the float ring gives different bits; over shared memory (the
// ranks trade their contributions: Collective::AllReduceBy, started and waited for in pieces as a
// step's buckets) and over TCP (the int64 reductions) alike.
#include <cstring>
#include <latch>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/exact_sum.h"
#include "core/status_macros.h"
#include "core/store.h"
#include "core/testing.h"
#include "workers/gloo/gloo_collective.h"

namespace lockstep {
namespace {

constexpr int kContributions = 4;
constexpr size_t kN = 30011;  // several blocks, the last one partial

std::vector<std::vector<float>> Contributions() {
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  std::vector<std::vector<float>> c(kContributions, std::vector<float>(kN));
  for (auto& x : c) {
    for (float& f : x) f = std::ldexp(mantissa(gen), exponent(gen));
  }
  return c;
}

enum class Path { kSharedMemory, kTcp, kFloatRing };

// Rank r holds contributions groups[r], in that order; every rank's sum (kFloatRing:
// the ring on each rank's float partial sum instead of ExactSum). Over shared memory
// the sum is started in three pieces (at multiples of the block) and waited for.
std::vector<std::vector<float>> SumOnRanks(const std::vector<std::vector<int>>& groups,
                                           const std::vector<std::vector<float>>& c,
                                           Path path = Path::kSharedMemory) {
  const bool float_ring = path == Path::kFloatRing;
  const int ranks = static_cast<int>(groups.size());
  static int job = 0;
  const std::string prefix = absl::StrCat("exact_sum_", job++);
  MemoryStore store;
  std::vector<std::vector<float>> out(ranks, std::vector<float>(kN));
  std::vector<absl::Status> status(ranks);
  // Each rank's collective lives until every rank has finished: a rank that closed its
  // connections while a peer still waited in the last collective would fail the peer.
  std::latch finished(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Collective> collective;
      status[r] = [&]() -> absl::Status {
        if (ranks > 1) {
          GlooOptions options;
          options.hostname = "127.0.0.1";
          options.prefix = prefix;
          options.shared_memory = path != Path::kTcp;
          ASSIGN_OR_RETURN(collective, GlooCollective::Create(r, ranks, &store, options));
        }
        std::vector<const float*> local;
        for (int i : groups[r]) local.push_back(c[i].data());
        if (float_ring) {
          for (size_t i = 0; i < kN; ++i) {
            for (const float* x : local) out[r][i] += x[i];
          }
          if (collective == nullptr) return absl::OkStatus();
          return collective->AllReduceSum(out[r].data(), kN, {});
        }
        ExactSum sum(collective.get(), kContributions);
        EXPECT_EQ(sum.overlaps(), ranks > 1 && path == Path::kSharedMemory);
        for (int round = 0; round < 2; ++round) {  // scratch reused: the same again
          RETURN_IF_ERROR(sum.Sum(local, kN, out[r].data(), {}));
        }
        if (!sum.overlaps()) return absl::OkStatus();
        std::vector<float> pieces(kN);
        CollectiveTicket last = 0;
        for (size_t begin :
             {size_t{0}, 3 * ExactSum::kDefaultBlock, 20 * ExactSum::kDefaultBlock}) {
          const size_t end = begin == 0                             ? 3 * ExactSum::kDefaultBlock
                             : begin < 20 * ExactSum::kDefaultBlock ? 20 * ExactSum::kDefaultBlock
                                                                    : kN;
          std::vector<const float*> at;
          for (const float* x : local) at.push_back(x + begin);
          ASSIGN_OR_RETURN(last, sum.StartSum(at, end - begin, pieces.data() + begin, {}));
        }
        RETURN_IF_ERROR(collective->Wait(last));
        EXPECT_EQ(pieces, out[r]);
        return absl::OkStatus();
      }();
      finished.arrive_and_wait();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) EXPECT_OK(s);
  return out;
}

TEST(ExactSumGloo, EveryGroupingAndOrderGivesTheSameBits) {
  const auto c = Contributions();
  const std::vector<float> want = SumOnRanks({{0, 1, 2, 3}}, c)[0];
  const std::vector<std::vector<std::vector<int>>> groupings = {
      {{3, 1, 0, 2}},   {{0, 1}, {2, 3}},     {{3}, {2, 0, 1}},
      {{2, 0}, {3, 1}}, {{0}, {1}, {2}, {3}}, {{3}, {1}, {0}, {2}},
  };
  for (const Path path : {Path::kSharedMemory, Path::kTcp}) {
    for (const auto& groups : groupings) {
      const auto got = SumOnRanks(groups, c, path);
      for (size_t r = 0; r < got.size(); ++r) {
        ASSERT_EQ(std::memcmp(got[r].data(), want.data(), kN * sizeof(float)), 0)
            << groups.size() << " ranks, rank " << r
            << (path == Path::kTcp ? " over TCP" : " over shared memory");
      }
    }
  }
}

// The data tells an order-dependent sum apart: the float ring on 4 ranks differs from one
// rank's sum in the same order of contributions.
TEST(ExactSumGloo, FloatSumsOfTheSameDataDiffer) {
  const auto c = Contributions();
  const std::vector<float> one = SumOnRanks({{0, 1, 2, 3}}, c, Path::kFloatRing)[0];
  const std::vector<float> four = SumOnRanks({{0}, {1}, {2}, {3}}, c, Path::kFloatRing)[0];
  EXPECT_NE(std::memcmp(one.data(), four.data(), kN * sizeof(float)), 0);
}

}  // namespace
}  // namespace lockstep
