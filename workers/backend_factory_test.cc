#include "workers/backend_factory.h"

#include "core/testing.h"

#ifdef LOCKSTEP_HAVE_CUDA
#include "workers/cuda/cuda_backend.h"
#endif

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

TEST(ParseDevice, AcceptsCpuAndCudaOrdinals) {
  EXPECT_EQ(*ParseDevice("cpu"), (Device{Device::Kind::kCpu, 0}));
  EXPECT_EQ(*ParseDevice("cuda"), (Device{Device::Kind::kCuda, 0}));
  EXPECT_EQ(*ParseDevice("cuda:0"), (Device{Device::Kind::kCuda, 0}));
  EXPECT_EQ(*ParseDevice("cuda:13"), (Device{Device::Kind::kCuda, 13}));
}

TEST(ParseDevice, RejectsAnythingElseNamingIt) {
  for (const char* bad : {"", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:+1", "cuda:1x", "cuda:0:1",
                          "cuda1", "cuda:99999999999"}) {
    EXPECT_THAT(ParseDevice(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr(std::string("\"") + bad + "\"")))
        << bad;
  }
}

TEST(BackendSource, CpuJobsGetTheirOwnBackendWithTheirThreads) {
  ASSERT_OK_AND_ASSIGN(auto source, BackendSource::Create("cpu", 2));
  EXPECT_EQ(source->threads(), 2);
  v1::JobSpec spec;
  ASSERT_OK_AND_ASSIGN(auto a, source->ForJob(spec));
  spec.set_threads(1);
  ASSERT_OK_AND_ASSIGN(auto b, source->ForJob(spec));
  EXPECT_EQ(a->Name(), "cpu");
  EXPECT_NE(a.get(), b.get());
}

TEST(BackendSource, ACpuJobAskingForMoreThreadsThanTheWorkerHasIsRefusedNamingThreads) {
  ASSERT_OK_AND_ASSIGN(auto source, BackendSource::Create("cpu", 2));
  v1::JobSpec spec;
  spec.set_threads(3);
  EXPECT_THAT(source->ForJob(spec),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("threads: the job asks for 3 CPU threads; this worker has 2")));
}

TEST(BackendSource, RejectsABadDeviceOrThreadCount) {
  EXPECT_THAT(BackendSource::Create("tpu:0", 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tpu:0")));
  EXPECT_THAT(BackendSource::Create("cpu", 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("threads")));
}

// What a GPU worker reports when it cannot start, here: built without CUDA, or no GPU.
TEST(BackendSource, CudaWithoutAGpuIsAFailedPrecondition) {
#ifdef LOCKSTEP_HAVE_CUDA
  ASSERT_TRUE(BuiltWithCuda());
  absl::StatusOr<int> count = CudaDeviceCount();
  if (count.ok() && *count > 0) {
    ASSERT_OK_AND_ASSIGN(auto source, BackendSource::Create("cuda:0", 1));
    ASSERT_OK_AND_ASSIGN(auto a, source->ForJob(v1::JobSpec()));
    ASSERT_OK_AND_ASSIGN(auto b, source->ForJob(v1::JobSpec()));
    EXPECT_EQ(a->Name(), "cuda:0");
    EXPECT_EQ(a.get(), b.get());  // one backend per device
    EXPECT_THAT(BackendSource::Create("cuda:" + std::to_string(*count), 1),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device")));
    return;
  }
  EXPECT_THAT(BackendSource::Create("cuda:0", 1),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device")));
#else
  ASSERT_FALSE(BuiltWithCuda());
  EXPECT_THAT(BackendSource::Create("cuda:0", 1),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("this worker was built without CUDA")));
#endif
}

}  // namespace
}  // namespace lockstep
