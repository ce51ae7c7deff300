// The NCCL collective on one GPU. NCCL refuses two ranks of one communicator on the same
// device, so a one-GPU machine can run only world size 1 (the all-reduce of one rank is
// the identity, which still checks that it runs in place on the right stream, eagerly
// and inside a CUDA graph) and the failure paths of larger worlds whose peers never come.
// Several ranks need several GPUs (or processes on several machines).
#include "workers/nccl/nccl_collective.h"

#include <limits>

#include "workers/cuda/cuda_testing.h"

namespace lockstep {
namespace {

using testing::Bitwise;
using testing::CudaTest;
using ::testing::HasSubstr;
using testing::RandomFloats;
using testing::StatusIs;

TEST(NcclCollectiveNoGpu, RejectsBadRanksAndNonCudaBackends) {
  MemoryStore store;
  auto cpu = NewCpuBackend(DefaultCpuThreads());
  EXPECT_THAT(NewNcclCollective(2, 2, &store, cpu.get()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2 is not in [0, 2)")));
  EXPECT_THAT(NewNcclCollective(0, 1, &store, cpu.get()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a CUDA backend")));
}

using NcclTest = CudaTest;

TEST_F(NcclTest, OneRankAllReduceRunsInPlaceEagerlyAndInAGraph) {
  MemoryStore store;
  ASSERT_OK_AND_ASSIGN(auto nccl, NewNcclCollective(0, 1, &store, cuda_.get()));
  EXPECT_EQ(nccl->size(), 1);
  const size_t n = (size_t{1} << 20) + 3;
  const auto x = RandomFloats(n, 1);
  Buffer data = ToDevice(x);
  // Eager: queued behind a kernel on the same stream, so it sums the divided values.
  EXPECT_OK(cuda_->Divide(n, 2.0f, data.as()));
  ASSERT_OK(nccl->AllReduceSum(data.as(), n, {}));
  std::vector<float> want = x;
  for (float& v : want) v /= 2.0f;
  EXPECT_TRUE(Bitwise(ToHost(data, n), want));
  // Captured with a kernel, then replayed twice.
  ASSERT_OK_AND_ASSIGN(auto graph, cuda_->Capture([&] {
    EXPECT_OK(cuda_->Divide(n, 2.0f, data.as()));
    return nccl->AllReduceSum(data.as(), n, {});
  }));
  ASSERT_OK(graph->Launch());
  ASSERT_OK(graph->Launch());
  ASSERT_OK(cuda_->Synchronize());
  for (float& v : want) v = (v / 2.0f) / 2.0f;
  EXPECT_TRUE(Bitwise(ToHost(data, n), want));
}

// The int64 sum and max of the exact sums (core/exact_sum_device.h) with one rank: in
// place, queued behind the kernel that wrote the values (the exact sum's float -> int64
// conversion), eagerly; their results the identity.
TEST_F(NcclTest, OneRankInt64SumAndMaxRunInPlaceBehindTheConversion) {
  MemoryStore store;
  ASSERT_OK_AND_ASSIGN(auto nccl, NewNcclCollective(0, 1, &store, cuda_.get()));
  const size_t n = 5000, block = 1024, blocks = (n + block - 1) / block;
  const auto x = RandomFloats(n, 3);
  std::vector<int64_t> exponents(blocks), want(n);
  ASSERT_OK(cpu_->ExactBlockExponents(n, block, x.data(), false, exponents.data()));
  ASSERT_OK(cpu_->ExactToFixed(n, block, 2, exponents.data(), x.data(), false, want.data()));
  Buffer dx = ToDevice(x), de = ToDevice(exponents), fixed = ToDevice(std::vector<int64_t>(n));
  ASSERT_OK(
      cuda_->ExactToFixed(n, block, 2, de.as<int64_t>(), dx.as(), false, fixed.as<int64_t>()));
  ASSERT_OK(nccl->AllReduceInt64(fixed.as<int64_t>(), n, ReduceOp::kSum, {}));
  EXPECT_EQ(ToHost<int64_t>(fixed, n), want);
  std::vector<int64_t> slots = {std::numeric_limits<int64_t>::min(), -3, 0, int64_t{1} << 40};
  Buffer dslots = ToDevice(slots);
  ASSERT_OK(nccl->AllReduceInt64(dslots.as<int64_t>(), slots.size(), ReduceOp::kMax, {}));
  EXPECT_EQ(ToHost<int64_t>(dslots, slots.size()), slots);
}

TEST_F(NcclTest, OneCollectivePerBackend) {
  MemoryStore store;
  ASSERT_OK_AND_ASSIGN(auto first, NewNcclCollective(0, 1, &store, cuda_.get(), {.key = "a"}));
  EXPECT_THAT(NewNcclCollective(0, 1, &store, cuda_.get(), {.key = "b"}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("already has")));
}

TEST_F(NcclTest, MissingRankZeroIsDeadlineExceededNamingTheKey) {
  MemoryStore store;
  EXPECT_THAT(NewNcclCollective(1, 2, &store, cuda_.get(),
                                {.key = "job7/nccl", .timeout = absl::Milliseconds(200)}),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("job7/nccl")));
}

TEST_F(NcclTest, MissingPeerTimesOutTheInitAndAbortsIt) {
  MemoryStore store;
  EXPECT_THAT(NewNcclCollective(0, 2, &store, cuda_.get(), {.timeout = absl::Seconds(2)}),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("communicator init did not finish within 2s")));
  EXPECT_TRUE(store.Get("nccl_unique_id", absl::ZeroDuration()).ok());  // rank 0 published
  // The backend is still usable, and a new communicator can be built on it.
  ASSERT_OK_AND_ASSIGN(auto nccl, NewNcclCollective(0, 1, &store, cuda_.get(), {.key = "second"}));
  Buffer one = ToDevice(std::vector<float>{1.5f});
  ASSERT_OK(nccl->AllReduceSum(one.as(), 1, {}));
  EXPECT_EQ(ToHost(one, 1), std::vector<float>{1.5f});
}

}  // namespace
}  // namespace lockstep
