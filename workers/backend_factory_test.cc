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

TEST(MakeBackend, Cpu) {
  ASSERT_OK_AND_ASSIGN(auto backend, MakeBackend("cpu"));
  EXPECT_EQ(backend->Name(), "cpu");
}

TEST(MakeBackend, RejectsABadDevice) {
  EXPECT_THAT(MakeBackend("tpu:0"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tpu:0")));
}

// What a GPU worker reports when it cannot start, here: built without CUDA, or no GPU.
TEST(MakeBackend, CudaWithoutAGpuIsAFailedPrecondition) {
#ifdef LOCKSTEP_HAVE_CUDA
  ASSERT_TRUE(BuiltWithCuda());
  absl::StatusOr<int> count = CudaDeviceCount();
  if (count.ok() && *count > 0) {
    ASSERT_OK_AND_ASSIGN(auto backend, MakeBackend("cuda:0"));
    EXPECT_EQ(backend->Name(), "cuda:0");
    EXPECT_THAT(MakeBackend("cuda:" + std::to_string(*count)),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device")));
    return;
  }
  EXPECT_THAT(MakeBackend("cuda:0"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device")));
#else
  ASSERT_FALSE(BuiltWithCuda());
  EXPECT_THAT(MakeBackend("cuda:0"), StatusIs(absl::StatusCode::kFailedPrecondition,
                                              HasSubstr("this worker was built without CUDA")));
#endif
}

}  // namespace
}  // namespace lockstep
