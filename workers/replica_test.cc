// Replica on the CPU backend with the real Fashion-MNIST splits: config checks, state
// transfer in pieces, step order, reproducibility and evaluation sums.
#include "workers/replica.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/token_dataset.h"
#include "core/plan.h"
#include "core/spec/spec.h"
#include "core/spec/testing.h"
#include "core/status_macros.h"
#include "core/store.h"
#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"
#include "workers/gloo/gloo_collective.h"

namespace lockstep {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::SmallMlpSpec;
using testing::StatusIs;

// A collective whose peers never answer; it keeps the timeout it was last called with.
class NullCollective final : public Collective {
 public:
  explicit NullCollective(absl::Duration* last_timeout = nullptr) : last_timeout_(last_timeout) {}
  std::string Name() const override { return "null"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  absl::Status AllReduceSum(float*, size_t, const CollectiveOptions& options) override {
    if (last_timeout_ != nullptr) *last_timeout_ = options.timeout;
    return absl::DeadlineExceededError("null collective");
  }
  void Abort(const absl::Status&) override {}

 private:
  absl::Duration* last_timeout_;
};

class ReplicaTest : public ::testing::Test {
 protected:
  // Kept for the process: the dataset loads once.
  static void SetUpTestSuite() {
    if (data_ != nullptr) return;
    DatasetCache cache;
    auto data = cache.GetIdx(kDefaultDatasetPath);
    ASSERT_TRUE(data.ok()) << data.status();
    data_ = new std::shared_ptr<const Datasets>(*data);
  }

  static absl::StatusOr<std::unique_ptr<Replica>> Make(
      const ReplicaConfig& config, std::unique_ptr<Collective> collective = nullptr) {
    ASSIGN_OR_RETURN(TrainSetup setup, SetupFromSpec(config.spec));
    return Replica::Create(config, std::move(setup), NewCpuBackend(1), JobData{*data_, nullptr},
                           std::move(collective));
  }

  // A state at step 3 with initialized params and non-zero optimizer slots.
  static TrainState SomeState(const v1::JobSpec& spec) {
    auto setup = SetupFromSpec(spec);
    EXPECT_TRUE(setup.ok()) << setup.status();
    TrainState s = TrainState::Create(
        setup->model.Init(TrainingPlan::InitKey(spec.seed(), setup->impl), setup->impl),
        setup->optimizer);
    s.step = 3;
    for (size_t k = 0; k < s.slots.size(); ++k) {
      for (size_t i = 0; i < s.slots[k].size(); ++i) s.slots[k][i] = 1e-3f * (i % 97) + k;
    }
    return s;
  }

  // Writes `bytes` in pieces of 1, 7, 1001, 4093, ... bytes (none a multiple of 4).
  static void WriteInPieces(Replica& r, const std::string& bytes) {
    const size_t sizes[] = {1, 7, 1001, 4093, 65537};
    size_t off = 0;
    for (int i = 0; off < bytes.size(); ++i) {
      const size_t n = std::min(sizes[i % 5], bytes.size() - off);
      ASSERT_OK(r.WriteState(off, std::string_view(bytes).substr(off, n)));
      off += n;
    }
  }

  static std::string ReadInPieces(Replica& r, size_t total) {
    std::string out(total, '\0');
    const size_t sizes[] = {3, 65539, 11, 999};
    size_t off = 0;
    for (int i = 0; off < total; ++i) {
      const size_t n = std::min(sizes[i % 4], total - off);
      EXPECT_THAT(r.ReadState(off, {out.data() + off, n}), IsOk());
      off += n;
    }
    return out;
  }

  static inline std::shared_ptr<const Datasets>* data_ = nullptr;
};

TEST_F(ReplicaTest, CheckReplicaConfigRejectsABadRankOrWorldSize) {
  const v1::JobSpec spec = SmallMlpSpec(2);
  EXPECT_THAT(CheckReplicaConfig({spec, 1, 2}), IsOk());
  for (auto [rank, world] : {std::pair{2, 2}, {-1, 2}, {0, 3}, {0, 1}}) {
    EXPECT_THAT(CheckReplicaConfig({spec, rank, world}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("rank ", rank, " of ", world))))
        << rank << " of " << world;
  }
}

TEST_F(ReplicaTest, CheckReplicaConfigRejectsAnIndivisibleBatch) {
  v1::JobSpec spec = SmallMlpSpec(1);
  spec.set_workers(3);  // 32 is not divisible by 3 (Validate would have refused it)
  EXPECT_THAT(CheckReplicaConfig({spec, 0, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("global_batch_size")));
}

TEST_F(ReplicaTest, CreateWantsACollectiveExactlyWhenThereArePeers) {
  EXPECT_THAT(Make({SmallMlpSpec(1), 0, 1}, std::make_unique<NullCollective>()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("collective")));
  EXPECT_THAT(Make({SmallMlpSpec(2), 0, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("collective")));
  ASSERT_OK_AND_ASSIGN(auto r, Make({SmallMlpSpec(2), 1, 2}, std::make_unique<NullCollective>()));
  EXPECT_NE(r->collective(), nullptr);
  EXPECT_EQ(r->state_header().step, 0);
}

TEST_F(ReplicaTest, CreateRefusesADatasetOfAnotherImageShapeOrMoreClasses) {
  v1::JobSpec spec = SmallMlpSpec(1);
  spec.mutable_model()->add_input_shape(32);
  spec.mutable_model()->add_input_shape(32);
  spec.mutable_model()->add_input_shape(3);
  EXPECT_THAT(Make({spec, 0, 1}), StatusIs(absl::StatusCode::kInvalidArgument,
                                           AllOf(HasSubstr("dataset.path"), HasSubstr("images are"),
                                                 HasSubstr("the model takes"))));
  ASSERT_OK_AND_ASSIGN(v1::JobSpec five, ParseSpec(R"(
model: {layers: [flatten, {dense: {features: 10}}]}
optimizer: {kind: sgd, learning_rate: 0.1}
global_batch_size: 32
steps: 1
)",
                                                   "five.yaml"));
  ASSERT_OK_AND_ASSIGN(five, Validate(five));
  // Validate refuses fewer outputs than the installed dataset's 10 classes (at submit): 5
  // outputs only after it, for the replica's own check (of datasets only workers see).
  five.mutable_model()->mutable_layers(1)->mutable_dense()->set_features(5);
  EXPECT_THAT(Make({five, 0, 1}), StatusIs(absl::StatusCode::kInvalidArgument,
                                           AllOf(HasSubstr("dataset.path"), HasSubstr(": label"),
                                                 HasSubstr("is not in [0, 5)"))));
}

TEST_F(ReplicaTest, StateRoundTripsInOddPieces) {
  const v1::JobSpec spec = SmallMlpSpec();
  ASSERT_OK_AND_ASSIGN(auto r, Make({spec, 0, 1}));
  const TrainState state = SomeState(spec);
  const std::string bytes = StateBytes(state);
  const StateHeader h = r->state_header();
  EXPECT_EQ(h.param_count, state.params.size());
  EXPECT_EQ(h.slot_count, state.slots.size());
  ASSERT_OK_AND_ASSIGN(uint64_t total, h.Bytes());
  ASSERT_EQ(total, bytes.size());
  WriteInPieces(*r, bytes);
  EXPECT_TRUE(ReadInPieces(*r, bytes.size()) == bytes);
  ASSERT_OK_AND_ASSIGN(uint64_t checksum, r->ParamChecksum());
  EXPECT_EQ(checksum, ParamChecksum(state.params));
}

TEST_F(ReplicaTest, StateRangesOutsideTheStateAreRejected) {
  ASSERT_OK_AND_ASSIGN(auto r, Make({SmallMlpSpec(), 0, 1}));
  ASSERT_OK_AND_ASSIGN(const uint64_t total, r->state_header().Bytes());
  char buf[8] = {};
  EXPECT_THAT(r->WriteState(total - 4, std::string_view(buf, 4)), IsOk());
  EXPECT_THAT(r->WriteState(total, std::string_view()), IsOk());
  EXPECT_THAT(r->WriteState(total - 3, std::string_view(buf, 4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
  EXPECT_THAT(r->WriteState(total + 1, std::string_view()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
  EXPECT_THAT(r->WriteState(~uint64_t{0} - 2, std::string_view(buf, 8)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
  EXPECT_THAT(r->ReadState(total, {buf, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
}

TEST_F(ReplicaTest, AStepOutOfOrderIsAbortedNamingBothSteps) {
  ASSERT_OK_AND_ASSIGN(auto r, Make({SmallMlpSpec(), 0, 1}));
  r->set_step(4);
  std::vector<int32_t> idx(32);
  for (int i = 0; i < 32; ++i) idx[i] = i;
  EXPECT_THAT(
      r->Step({.step = 7, .key = {1, 2}, .indices = idx}),
      StatusIs(absl::StatusCode::kAborted, AllOf(HasSubstr("step 7"), HasSubstr("at step 4"))));
  EXPECT_EQ(r->state_header().step, 4);
}

TEST_F(ReplicaTest, AStepsAllReduceWaitsAsLongAsItsCommandSaysAtMostTheJobsTimeout) {
  const v1::JobSpec spec = SmallMlpSpec(2);
  std::vector<int32_t> idx(16);  // a half of the global batch
  for (int i = 0; i < 16; ++i) idx[i] = i;
  const std::pair<absl::Duration, absl::Duration> cases[] = {
      {absl::Seconds(3), absl::Seconds(3)},       // the coordinator's, from recent step times
      {absl::ZeroDuration(), absl::Seconds(30)},  // none: the job's
      {absl::Seconds(90), absl::Seconds(30)}};    // never longer than the job's
  for (const auto& [asked, used] : cases) {
    absl::Duration got;
    ReplicaConfig config{spec, 0, 2, absl::Seconds(30)};
    ASSERT_OK_AND_ASSIGN(auto r, Make(config, std::make_unique<NullCollective>(&got)));
    EXPECT_THAT(r->Step({.step = 0, .key = {1, 2}, .indices = idx, .collective_timeout = asked}),
                StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("null collective")));
    EXPECT_EQ(got, used) << asked;
  }
}

TEST_F(ReplicaTest, ABadBatchIsInvalidArgument) {
  ASSERT_OK_AND_ASSIGN(auto r, Make({SmallMlpSpec(), 0, 1}));
  std::vector<int32_t> idx(31, 0);
  EXPECT_THAT(r->Step({.step = 0, .indices = idx}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("local batch is 32")));
  idx.push_back(60000);
  EXPECT_THAT(r->Step({.step = 0, .indices = idx}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sample index 60000")));
}

TEST_F(ReplicaTest, StepsAdvanceAndAreBitwiseReproducible) {
  const v1::JobSpec spec = SmallMlpSpec();
  const std::string initial = StateBytes(SomeState(spec));
  std::string after[2];
  uint64_t checksums[2] = {};
  for (int k = 0; k < 2; ++k) {
    ASSERT_OK_AND_ASSIGN(auto r, Make({spec, 0, 1}));
    WriteInPieces(*r, initial);
    r->set_step(3);
    for (int64_t s = 3; s < 6; ++s) {
      std::vector<int32_t> idx(32);
      for (int i = 0; i < 32; ++i) idx[i] = static_cast<int32_t>((s * 131 + i * 17) % 60000);
      ASSERT_OK_AND_ASSIGN(StepResult res, r->Step({.step = s,
                                                    .key = {static_cast<uint32_t>(s), 9},
                                                    .indices = idx,
                                                    .want_checksum = true}));
      EXPECT_EQ(res.step, s);
      EXPECT_TRUE(std::isfinite(res.loss)) << res.loss;
      EXPECT_GE(res.accuracy, 0);
      EXPECT_LE(res.accuracy, 1);
      EXPECT_EQ(r->state_header().step, s + 1);
      ASSERT_OK_AND_ASSIGN(checksums[k], r->ParamChecksum());
      EXPECT_EQ(res.param_checksum, checksums[k]);
    }
    after[k] = ReadInPieces(*r, initial.size());
    EXPECT_FALSE(after[k] == initial);
  }
  EXPECT_TRUE(after[0] == after[1]);
  EXPECT_EQ(checksums[0], checksums[1]);
}

TEST_F(ReplicaTest, CheckReplicaConfigRejectsBadLogicalReplicas) {
  const absl::Duration t = absl::Seconds(30);
  EXPECT_THAT(CheckReplicaConfig({SmallMlpSpec(2), 1, 2, t, 4, 2, 2}), IsOk());
  EXPECT_THAT(CheckReplicaConfig({SmallMlpSpec(1), 0, 1, t, 4, 0, 4}), IsOk());
  // An elastic job runs on fewer workers than its most (SmallMlpSpec(4): workers 4).
  EXPECT_THAT(CheckReplicaConfig({SmallMlpSpec(4), 1, 3, t, 4, 1, 2}), IsOk());
  EXPECT_THAT(CheckReplicaConfig({SmallMlpSpec(2), 1, 3, t, 4, 1, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 1 of 3")));
  for (const ReplicaConfig& c :
       std::vector<ReplicaConfig>{
           {SmallMlpSpec(2), 0, 2, t, 1, 0, 1},   // fewer replicas than workers
           {SmallMlpSpec(2), 1, 2, t, 4, 3, 2},   // past the last replica
           {SmallMlpSpec(2), 0, 2, t, 4, 0, 0},   // none
           {SmallMlpSpec(1), 0, 1, t, 4, 0, 2}})  // alone, but not all of them
  {
    EXPECT_THAT(CheckReplicaConfig(c),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("logical replicas")))
        << c.logical_replicas << " " << c.logical_first << " " << c.logical_count;
  }
  EXPECT_THAT(CheckReplicaConfig({SmallMlpSpec(1), 0, 1, t, 3, 0, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("global_batch_size")));
}

// A job on 4 logical replicas: one worker holding all of them and two workers holding two
// each (threads, Gloo on loopback) end with the same state bytes, checksums and
// per-replica losses.
TEST_F(ReplicaTest, LogicalReplicasGiveTheSameBitsOnOneAndTwoWorkers) {
  const int v = 4;
  const std::string initial = StateBytes(SomeState(SmallMlpSpec()));
  struct Run {
    std::vector<std::string> after;
    std::vector<uint64_t> checksums;
    std::vector<float> losses;  // [step][replica]
  };
  auto run = [&](int workers) {
    Run out;
    out.after.resize(workers);
    out.checksums.resize(workers);
    out.losses.assign(3 * v, -1.0f);
    MemoryStore store;
    std::vector<absl::Status> status(workers);
    // Each replica (and its collective) lives until every worker has finished: a rank that
    // closed its connections while a peer still waited in the last collective would fail
    // the peer.
    std::latch finished(workers);
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        std::unique_ptr<Replica> r;
        status[w] = [&]() -> absl::Status {
          std::unique_ptr<Collective> collective;
          if (workers > 1) {
            GlooOptions options;
            options.hostname = "127.0.0.1";
            options.prefix = absl::StrCat("replica_logical_", workers);
            ASSIGN_OR_RETURN(collective, GlooCollective::Create(w, workers, &store, options));
          }
          const int first = w * v / workers, count = v / workers;
          ASSIGN_OR_RETURN(
              r, Make({SmallMlpSpec(workers), w, workers, absl::Seconds(30), v, first, count},
                      std::move(collective)));
          RETURN_IF_ERROR(r->WriteState(0, initial));
          r->set_step(3);
          for (int64_t s = 3; s < 6; ++s) {
            std::vector<int32_t> idx(32);
            for (int i = 0; i < 32; ++i) idx[i] = static_cast<int32_t>((s * 131 + i * 17) % 60000);
            std::vector<rng::Key> keys(v);
            for (int k = 0; k < v; ++k) keys[k] = {static_cast<uint32_t>(s), uint32_t(k)};
            const int rows = 32 / v;
            ASSIGN_OR_RETURN(StepResult res,
                             r->Step({.step = s,
                                      .indices = std::span(idx).subspan(first * rows, count * rows),
                                      .want_checksum = true,
                                      .keys = std::span(keys).subspan(first, count)}));
            if (res.replica_losses.size() != size_t(count)) {
              return absl::InternalError("one loss per local replica expected");
            }
            for (int j = 0; j < count; ++j)
              out.losses[(s - 3) * v + first + j] = res.replica_losses[j];
            out.checksums[w] = res.param_checksum;
          }
          out.after[w] = ReadInPieces(*r, initial.size());
          return absl::OkStatus();
        }();
        finished.arrive_and_wait();
      });
    }
    for (std::thread& t : threads) t.join();
    for (const absl::Status& s : status) EXPECT_OK(s);
    return out;
  };
  const Run one = run(1), two = run(2);
  EXPECT_FALSE(one.after[0] == initial);
  for (int w = 0; w < 2; ++w) {
    EXPECT_TRUE(two.after[w] == one.after[0]) << "worker " << w;
    EXPECT_EQ(two.checksums[w], one.checksums[0]) << "worker " << w;
  }
  EXPECT_EQ(two.losses, one.losses);
  EXPECT_EQ(std::count(one.losses.begin(), one.losses.end(), -1.0f), 0);
}

// With logical replicas a replica's gradients do not depend on where it runs (a model
// without BatchNorm): the digest the second of two workers feeds for its first replica
// (replica 2 of 4) is the one a worker holding all four recomputes from that replica's
// rows and key at the same state, before its own step; a lying worker's differs.
TEST_F(ReplicaTest, ALogicalReplicaRecomputedOnAnotherWorkerHasTheBitsItsWorkerFeeds) {
  const int v = 4, rows = 8;
  v1::JobSpec spec = SmallMlpSpec(2);
  spec.mutable_model()->set_dropout_rate(0.2);  // so that the replica's key matters
  const std::string initial = StateBytes(SomeState(spec));
  std::vector<int32_t> idx(v * rows);
  for (int i = 0; i < v * rows; ++i) idx[i] = i * 13 + 1;
  std::vector<rng::Key> keys(v);
  for (int k = 0; k < v; ++k) keys[k] = {9u, static_cast<uint32_t>(k)};
  auto rows_of = [&](int first, int count) {
    return std::span<const int32_t>(idx).subspan(first * rows, count * rows);
  };
  auto keys_of = [&](int first, int count) {
    return std::span<const rng::Key>(keys).subspan(first, count);
  };
  // Two workers of two replicas each (Gloo on loopback), the second lying when `lie`: the
  // second's answer.
  auto fed = [&](bool lie) -> absl::StatusOr<StepResult> {
    MemoryStore store;
    std::vector<absl::StatusOr<StepResult>> got(2, absl::UnknownError("not run"));
    std::latch finished(2);  // each replica lives until both have stepped
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back([&, w] {
        std::unique_ptr<Replica> r;
        got[w] = [&]() -> absl::StatusOr<StepResult> {
          GlooOptions options;
          options.hostname = "127.0.0.1";
          options.prefix = "replica_logical_audit";
          ASSIGN_OR_RETURN(std::unique_ptr<Collective> collective,
                           GlooCollective::Create(w, 2, &store, options));
          ASSIGN_OR_RETURN(
              r, Make({spec, w, 2, absl::Seconds(30), v, 2 * w, 2}, std::move(collective)));
          WriteInPieces(*r, initial);
          r->set_step(3);
          if (lie && w == 1) {
            r->set_gradient_fault(
                [](Backend& b, float* g, size_t n) { return b.Divide(n, 0.5f, g); });
          }
          return r->Step({.step = 3,
                          .indices = rows_of(2 * w, 2),
                          .want_grad_digest = w == 1,
                          .keys = keys_of(2 * w, 2)});
        }();
        finished.arrive_and_wait();
      });
    }
    for (std::thread& t : threads) t.join();
    RETURN_IF_ERROR(got[0].status());
    return got[1];
  };
  ASSERT_OK_AND_ASSIGN(StepResult honest, fed(false));
  ASSERT_OK_AND_ASSIGN(auto all, Make({spec, 0, 1, absl::Seconds(30), v, 0, v}));
  WriteInPieces(*all, initial);
  all->set_step(3);
  ASSERT_OK_AND_ASSIGN(StepResult recomputed, all->Step({.step = 3,
                                                         .indices = rows_of(0, v),
                                                         .audit = true,
                                                         .audit_indices = rows_of(2, 1),
                                                         .audit_key = keys[2],
                                                         .keys = keys_of(0, v)}));
  EXPECT_TRUE(recomputed.audited);
  EXPECT_NE(honest.grad_digest, 0u);
  EXPECT_EQ(recomputed.audit_digest, honest.grad_digest);
  ASSERT_EQ(honest.replica_losses.size(), 2u);
  EXPECT_EQ(recomputed.audit_loss, honest.replica_losses[0]);
  ASSERT_OK_AND_ASSIGN(StepResult lying, fed(true));
  EXPECT_NE(lying.grad_digest, honest.grad_digest);
  EXPECT_EQ(lying.replica_losses, honest.replica_losses);  // the fault touches gradients only
}

TEST_F(ReplicaTest, AnAuditShardRecomputedBeforeTheStepHasTheBitsTheStepFeeds) {
  v1::JobSpec spec = SmallMlpSpec();
  spec.mutable_model()->set_dropout_rate(0.2);  // so that the audit's key matters
  const std::string initial = StateBytes(SomeState(spec));
  std::vector<int32_t> idx(32), other(32);
  for (int i = 0; i < 32; ++i) {
    idx[i] = i * 7;
    other[i] = i * 7 + 1;
  }
  auto run = [&](std::span<const int32_t> audit_idx, rng::Key audit_key,
                 StepExecutor::GradientFault fault) -> absl::StatusOr<StepResult> {
    ASSIGN_OR_RETURN(auto r, Make({spec, 0, 1}));
    WriteInPieces(*r, initial);
    r->set_step(3);
    if (fault) r->set_gradient_fault(fault);
    return r->Step({.step = 3,
                    .key = {5, 6},
                    .indices = idx,
                    .want_grad_digest = true,
                    .audit = true,
                    .audit_indices = audit_idx,
                    .audit_key = audit_key});
  };
  // Its own shard and key: what it recomputes is what its step feeds the all-reduce.
  ASSERT_OK_AND_ASSIGN(StepResult same, run(idx, {5, 6}, nullptr));
  EXPECT_TRUE(same.audited);
  EXPECT_NE(same.grad_digest, 0u);
  EXPECT_EQ(same.audit_digest, same.grad_digest);
  EXPECT_EQ(same.audit_loss, same.loss);
  // The recomputation leaves the step as it was.
  ASSERT_OK_AND_ASSIGN(auto plain, Make({spec, 0, 1}));
  WriteInPieces(*plain, initial);
  plain->set_step(3);
  ASSERT_OK_AND_ASSIGN(
      StepResult unaudited,
      plain->Step({.step = 3, .key = {5, 6}, .indices = idx, .want_grad_digest = true}));
  EXPECT_EQ(unaudited.grad_digest, same.grad_digest);
  EXPECT_EQ(unaudited.loss, same.loss);
  EXPECT_FALSE(unaudited.audited);
  // Another key, another shard: other bits.
  ASSERT_OK_AND_ASSIGN(StepResult key, run(idx, {5, 7}, nullptr));
  EXPECT_NE(key.audit_digest, same.grad_digest);
  ASSERT_OK_AND_ASSIGN(StepResult shard, run(other, {5, 6}, nullptr));
  EXPECT_NE(shard.audit_digest, same.grad_digest);
  // A lying replica (the test-only fault) feeds and recomputes other bits; its loss is
  // the same (the fault touches gradients only).
  ASSERT_OK_AND_ASSIGN(StepResult lying, run(idx, {5, 6}, [](Backend& b, float* g, size_t n) {
                         return b.Divide(n, 0.5f, g);
                       }));
  EXPECT_NE(lying.grad_digest, same.grad_digest);
  EXPECT_EQ(lying.audit_digest, lying.grad_digest);
  EXPECT_EQ(lying.loss, same.loss);
  // A shard of another size is refused, naming the audit.
  std::vector<int32_t> short_shard(16, 0);
  EXPECT_THAT(run(short_shard, {5, 6}, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("audit shard:")));
}

TEST_F(ReplicaTest, EvaluateSumsOverTheRange) {
  const v1::JobSpec spec = SmallMlpSpec();
  ASSERT_OK_AND_ASSIGN(auto r, Make({spec, 0, 1}));
  WriteInPieces(*r, StateBytes(SomeState(spec)));
  EXPECT_EQ(r->test_examples(), 10000);
  EXPECT_EQ(r->train_examples(), 60000);
  ASSERT_OK_AND_ASSIGN(EvalSums a, r->Evaluate(0, 500));
  ASSERT_OK_AND_ASSIGN(EvalSums b, r->Evaluate(500, 1250));
  ASSERT_OK_AND_ASSIGN(EvalSums ab, r->Evaluate(0, 1250));
  EXPECT_EQ(a.count, 500);
  EXPECT_EQ(b.count, 750);
  EXPECT_EQ(ab.count, 1250);
  EXPECT_EQ(a.correct + b.correct, ab.correct);
  EXPECT_GE(a.correct, 0);
  EXPECT_LE(a.correct, 500);
  EXPECT_GT(a.loss_sum, 0);
  EXPECT_NEAR(a.loss_sum + b.loss_sum, ab.loss_sum, 1e-3 * ab.loss_sum);
  ASSERT_OK_AND_ASSIGN(EvalSums none, r->Evaluate(700, 700));
  EXPECT_EQ(none.count, 0);
  EXPECT_THAT(r->Evaluate(9000, 10001),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
}

// A sequence model predicts every position of a window: its accuracy is per token, its
// `correct` a count of tokens (of `predictions`), never a count of windows rounded.
TEST_F(ReplicaTest, EvaluateCountsEveryTokenOfASequenceModel) {
  const v1::JobSpec spec = testing::ValidSpec(R"(
model:
  input_shape: [16]
  layers: [{embed: {num_embeddings: 256, features: 8}}, {dense: {features: 256}}]
optimizer: {kind: adam, learning_rate: 0.05}
global_batch_size: 8
steps: 1
)");
  ASSERT_OK_AND_ASSIGN(Dataset tokens,
                       LoadTextDataset("/usr/share/games/fortunes/cookie", "test_path", 16));
  auto text = std::make_shared<Datasets>(Datasets{tokens, tokens});
  ASSERT_OK_AND_ASSIGN(TrainSetup setup, SetupFromSpec(spec));
  const std::vector<float> init =
      setup.model.Init(TrainingPlan::InitKey(0, setup.impl), setup.impl);
  const TrainState state = TrainState::Create(init, setup.optimizer);
  ASSERT_OK_AND_ASSIGN(auto r, Replica::Create({spec, 0, 1}, std::move(setup), NewCpuBackend(1),
                                               JobData{text, nullptr}, nullptr));
  WriteInPieces(*r, StateBytes(state));
  ASSERT_OK_AND_ASSIGN(EvalSums sums, r->Evaluate(0, 50));
  EXPECT_EQ(sums.count, 50);
  EXPECT_EQ(sums.predictions, 50 * 16);
  // The tokens the model gets right, counted one by one.
  ASSERT_OK_AND_ASSIGN(TrainSetup again, SetupFromSpec(spec));
  auto backend = NewCpuBackend(1);
  ASSERT_OK_AND_ASSIGN(auto exec, StepExecutor::Create(again.model, again.optimizer, again.impl, 8,
                                                       backend.get(), nullptr));
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(tokens));
  ASSERT_OK(exec->SetState(state));
  ASSERT_OK_AND_ASSIGN(EvalMetrics m, exec->Evaluate(d, 1000, 0, 50));
  EXPECT_EQ(sums.correct, m.correct);
  EXPECT_EQ(m.predictions, 50 * 16);
  EXPECT_DOUBLE_EQ(m.accuracy, static_cast<double>(m.correct) / m.predictions);
  EXPECT_GT(sums.correct, 0);
}

}  // namespace
}  // namespace lockstep
