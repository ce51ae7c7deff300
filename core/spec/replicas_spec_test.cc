// The spec's `replicas: V`, `workers: {min, max}` and `priority` (docs/elastic.md): how
// they parse, what Validate refuses (naming the field), and that a spec without them is
// unchanged.
#include "absl/strings/str_cat.h"
#include "core/spec/spec.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

constexpr char kBase[] = R"(
model: {kind: mlp, hidden: [32, 16], dropout_rate: 0.1}
optimizer: {kind: sgd, learning_rate: 0.1}
global_batch_size: 16
steps: 10
)";

absl::StatusOr<v1::JobSpec> ParseAndValidate(const std::string& extra) {
  auto spec = ParseSpec(absl::StrCat(kBase, extra), "spec.yaml");
  if (!spec.ok()) return spec.status();
  return Validate(*spec);
}

TEST(ReplicasSpec, ARangeOfWorkersParsesToMinAndMax) {
  ASSERT_OK_AND_ASSIGN(v1::JobSpec s, ParseAndValidate("replicas: 4\nworkers: {min: 1, max: 3}\n"));
  EXPECT_EQ(s.replicas(), 4u);
  EXPECT_EQ(s.workers(), 3u);
  EXPECT_EQ(s.min_workers(), 1u);
  EXPECT_EQ(LogicalWorld(s), 4);
  EXPECT_EQ(MinWorkers(s), 1);
  ASSERT_OK_AND_ASSIGN(
      v1::JobSpec json,
      Validate(*ParseSpec(
          R"({"model": {"kind": "cnn"}, "optimizer": {"kind": "sgd", "learningRate": 0.1},
          "globalBatchSize": 16, "steps": 1, "replicas": 4, "workers": {"min": 2, "max": 4}})",
          "spec.json")));
  EXPECT_EQ(json.workers(), 4u);
  EXPECT_EQ(json.min_workers(), 2u);
}

// CUDA workers run logical replicas too, their exact sums in device memory
// (core/exact_sum_device.h).
TEST(ReplicasSpec, CudaWorkersTakeReplicas) {
  ASSERT_OK_AND_ASSIGN(v1::JobSpec s,
                       ParseAndValidate("replicas: 4\nworkers: {min: 1, max: 2}\ndevice: cuda\n"));
  EXPECT_EQ(s.device(), "cuda");
  EXPECT_EQ(LogicalWorld(s), 4);
}

TEST(ReplicasSpec, PriorityDefaultsToZeroAndIsBounded) {
  ASSERT_OK_AND_ASSIGN(v1::JobSpec s, ParseAndValidate("workers: 2\n"));
  EXPECT_EQ(s.priority(), 0);
  ASSERT_OK_AND_ASSIGN(s, ParseAndValidate("workers: 2\npriority: -7\n"));
  EXPECT_EQ(s.priority(), -7);
  EXPECT_THAT(ParseAndValidate("workers: 2\npriority: 1001\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("priority: 1001 is outside -1000 to 1000")));
  EXPECT_THAT(ParseAndValidate("workers: 2\npriority: high\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("priority")));
}

TEST(ReplicasSpec, APlainNumberIsMinAndMax) {
  ASSERT_OK_AND_ASSIGN(v1::JobSpec s, ParseAndValidate("replicas: 4\nworkers: 2\n"));
  EXPECT_EQ(MinWorkers(s), 2);
  EXPECT_EQ(s.workers(), 2u);
  ASSERT_OK_AND_ASSIGN(v1::JobSpec only_max, ParseAndValidate("replicas: 4\nworkers: {max: 4}\n"));
  EXPECT_EQ(MinWorkers(only_max), 4);
}

TEST(ReplicasSpec, WithoutReplicasVIsNAndTheSpecIsUnchanged) {
  auto parsed = ParseSpec(absl::StrCat(kBase, "workers: 2\n"), "spec.yaml");
  ASSERT_OK(parsed);
  ASSERT_OK_AND_ASSIGN(v1::JobSpec s, Validate(*parsed));
  EXPECT_EQ(s.replicas(), 0u);
  EXPECT_EQ(s.min_workers(), 0u);  // not filled in: checkpoints' spec metadata stay as they were
  EXPECT_EQ(LogicalWorld(s), 2);
  EXPECT_EQ(MinWorkers(s), 2);
  // B % N, as before, names workers.
  EXPECT_THAT(ParseAndValidate("workers: 3\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("global_batch_size: 16 is not divisible by workers (3)")));
}

struct BadRange {
  const char* extra;
  const char* message;
};

class ReplicasSpecInvalid : public ::testing::TestWithParam<BadRange> {};

TEST_P(ReplicasSpecInvalid, NamesTheField) {
  EXPECT_THAT(ParseAndValidate(GetParam().extra),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ReplicasSpecInvalid,
    ::testing::Values(
        BadRange{"replicas: 3\nworkers: 1\n",
                 "global_batch_size: 16 is not divisible by replicas (3)"},
        BadRange{"replicas: 2\nworkers: 4\n", "replicas: 2 is fewer than workers (4)"},
        BadRange{"replicas: 4\nworkers: {min: 3, max: 2}\n",
                 "workers.min: 3 exceeds workers.max (2)"},
        BadRange{"workers: {min: 1, max: 2}\n", "workers.min: 1 differs from workers.max (2)"},
        BadRange{"replicas: 4\nworkers: {min: 1}\n", "workers.max: missing"},
        BadRange{"replicas: 4\nworkers: {min: 1, max: 2, most: 3}\n",
                 "workers.most: unknown field"},
        BadRange{"replicas: 4\nworkers: {min: -1, max: 2}\n", "workers.min: must be a positive"},
        BadRange{"replicas: 4\nworkers: {min: 1, max: 2}\nmin_workers: 1\n",
                 "workers: give the range as {min, max} or min_workers, not both"},
        BadRange{"replicas: 5000\nworkers: 1\n", "replicas: must be at most 4096"}));

}  // namespace
}  // namespace lockstep
