// Logical replicas (docs/elastic.md): one job on V = 4 logical replicas (a BatchNorm
// convnet with dropout, tools/reference/golden_replicas.py) computed by 1, 2, 3 and 4
// workers in this process (threads joined by Gloo over loopback, a MemoryStore), each
// worker a contiguous range of the replicas. Every run must end with bitwise the same
// params, batch_stats and optimizer state and report bitwise the same per-replica losses,
// and those must stay within 1e-5 of JAX's pmap on 4 devices at every step. The path of a
// CUDA worker (the exact sums in backend memory: core/exact_sum_device.h) must give the
// host path's bits.
#include <algorithm>
#include <cstring>
#include <latch>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/grad_digest.h"
#include "core/plan.h"
#include "core/status_macros.h"
#include "core/store.h"
#include "core/testing.h"
#include "tests/golden.h"
#include "workers/cpu/cpu_backend.h"
#include "workers/gloo/gloo_collective.h"

namespace lockstep {
namespace {

using testing::GoldenParams;
using ::testing::HasSubstr;
using testing::StatusIs;

using Golden = testing::SpecGolden;

constexpr char kFile[] = "replicas_pmap4.safetensors";
constexpr int kThreads = 2;  // every worker's backend alike, wherever a replica runs

// One replica's step as the audit compares it (docs/audit.md): its gradients' and its
// BatchNorm contributions' digests and its loss.
struct ReplicaDigests {
  uint64_t grads = 0, stats = 0;
  float loss = 0;
  bool operator==(const ReplicaDigests&) const = default;
};

// The audit's parts of a run (RunOptions::ride): per worker and step, its first local
// replica's digests (the taps) and the ride-along replica's.
struct AuditRun {
  std::vector<std::vector<ReplicaDigests>> first, ride;  // [worker][step]
};

struct RunOptions {
  bool backend_memory = false;  // the exact sums as on a CUDA worker (DeviceExactSum)
  // Not empty: worker w captures its first replica's digests and computes replica ride[w]
  // as the audit's ride-along.
  std::vector<int> ride;
  StepExecutor::GradientFault statistics_fault;  // on worker `liar`'s BatchNorm taps
  int liar = -1;
};

// One job's run: every logical replica's loss per step, and each worker's final state.
struct JobRun {
  std::vector<std::vector<float>> losses;  // [step][replica]
  // [worker][step]: every replica's loss as the worker learned it in the step's all-reduce
  std::vector<std::vector<std::vector<float>>> shared;
  std::vector<TrainState> states;    // per worker
  std::vector<absl::Status> status;  // per worker
  AuditRun audit;
};

// Worker w of `workers` holds replicas [w * V / workers, (w + 1) * V / workers). Its
// collective lives until every worker has finished (`finished`): a rank that closed its
// connections while a peer still waited in the last collective would fail the peer.
void RunWorker(const Golden& g, const Dataset& data, int workers, int w, Store* store,
               const std::string& prefix, std::latch* finished, const RunOptions& options,
               JobRun* run) {
  std::unique_ptr<Collective> collective;
  run->status[w] = [&]() -> absl::Status {
    const Model& m = g.setup.model;
    const int v = static_cast<int>(g.spec.workers()),
              b = static_cast<int>(g.spec.global_batch_size());
    const int first = w * v / workers, count = (w + 1) * v / workers - first;
    if (workers > 1) {
      GlooOptions options;
      options.hostname = "127.0.0.1";
      options.prefix = prefix;
      ASSIGN_OR_RETURN(collective, GlooCollective::Create(w, workers, store, options));
    }
    auto backend = NewCpuBackend(kThreads);
    ASSIGN_OR_RETURN(auto exec, StepExecutor::Create(m, g.setup.optimizer, g.setup.impl, b / v,
                                                     backend.get(), collective.get()));
    ASSIGN_OR_RETURN(DeviceDataset d, exec->Upload(data));
    TrainingPlan plan(g.spec.seed(), g.spec.dropout_seed(), g.setup.impl, data.size, b, v);
    RETURN_IF_ERROR(exec->SetState(TrainState::Create(m.Init(plan.init_key(), g.setup.impl),
                                                      g.setup.optimizer, m.InitStats())));
    if (options.backend_memory) exec->set_exact_sum_in_backend_memory_for_testing();
    if (w == options.liar) exec->set_statistics_fault(options.statistics_fault);
    RETURN_IF_ERROR(exec->SetLogicalReplicas(v, first, count));
    const bool audit = !options.ride.empty();
    exec->set_capture_local_gradients(audit);
    for (uint64_t s = 0; s < g.spec.steps(); ++s) {
      const StepPlan p = plan.Next();
      const std::span<const int32_t> rows(p.indices.data() + first * (b / v), count * (b / v));
      const std::span<const rng::Key> keys(p.keys.data() + first, count);
      StepExecutor::RideAlong ride;
      if (audit) {
        const int r = options.ride[w];
        ride = {&d, std::span<const int32_t>(p.indices.data() + r * (b / v), b / v), p.keys[r]};
      }
      ASSIGN_OR_RETURN(StepMetrics metrics,
                       exec->StepReplicas(d, rows, keys, audit ? &ride : nullptr));
      if (audit) {
        const StepExecutor::RideAlongResult& got = exec->ride_along_result();
        run->audit.first[w].push_back({GradDigest(exec->local_gradients()),
                                       GradDigest(exec->local_statistics()),
                                       metrics.replica_loss[0]});
        run->audit.ride[w].push_back(
            {GradDigest(got.gradients), GradDigest(got.statistics), got.loss});
      }
      for (int j = 0; j < count; ++j) run->losses[s][first + j] = metrics.replica_loss[j];
      if (metrics.all_replica_accuracy.size() != static_cast<size_t>(v)) {
        return absl::InternalError("not every replica's accuracy was shared");
      }
      run->shared[w].push_back(metrics.all_replica_loss);
    }
    ASSIGN_OR_RETURN(run->states[w], exec->GetState());
    return absl::OkStatus();
  }();
  finished->arrive_and_wait();
}

JobRun RunJob(const Golden& g, const Dataset& data, int workers, const RunOptions& options = {}) {
  static int job = 0;
  const std::string prefix = absl::StrCat("logical_replicas_", job++);
  MemoryStore store;
  JobRun run;
  run.losses.assign(g.spec.steps(), std::vector<float>(g.spec.workers(), -1.0f));
  run.states.resize(workers);
  run.shared.resize(workers);
  run.status.resize(workers);
  run.audit.first.resize(workers);
  run.audit.ride.resize(workers);
  std::latch finished(workers);
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w) {
    threads.emplace_back(RunWorker, std::cref(g), std::cref(data), workers, w, &store,
                         std::cref(prefix), &finished, std::cref(options), &run);
  }
  RunWorker(g, data, workers, 0, &store, prefix, &finished, options, &run);
  for (std::thread& t : threads) t.join();
  return run;
}

std::vector<uint32_t> Bits(const std::vector<float>& x) {
  std::vector<uint32_t> bits(x.size());
  std::memcpy(bits.data(), x.data(), x.size() * sizeof(float));
  return bits;
}

void ExpectBitwiseEqual(const TrainState& a, const TrainState& b, const std::string& what) {
  EXPECT_EQ(a.step, b.step) << what;
  EXPECT_EQ(Bits(a.params), Bits(b.params)) << what << ": params";
  EXPECT_EQ(Bits(a.batch_stats), Bits(b.batch_stats)) << what << ": batch_stats";
  ASSERT_EQ(a.slots.size(), b.slots.size()) << what;
  for (size_t i = 0; i < a.slots.size(); ++i) {
    EXPECT_EQ(Bits(a.slots[i]), Bits(b.slots[i])) << what << ": optimizer slot " << i;
  }
}

// The job on 1 worker, then the same bits on 2, 3 and 4; returns the 1-worker run.
JobRun ExpectSameBitsOnAnyWorkerCount(const Golden& g, const Dataset& data) {
  JobRun one = RunJob(g, data, 1);
  EXPECT_OK(one.status[0]);
  if (!one.status[0].ok()) return one;
  EXPECT_EQ(one.states[0].step, static_cast<int64_t>(g.spec.steps()));
  for (int workers : {2, 3, 4}) {
    const JobRun run = RunJob(g, data, workers);
    for (int w = 0; w < workers; ++w) {
      EXPECT_OK(run.status[w]);
      if (!run.status[w].ok()) return one;
      ExpectBitwiseEqual(run.states[w], one.states[0],
                         absl::StrCat(workers, " workers, worker ", w, " vs 1 worker"));
    }
    for (size_t s = 0; s < one.losses.size(); ++s) {
      EXPECT_EQ(Bits(run.losses[s]), Bits(one.losses[s])) << workers << " workers, step " << s;
      // Each worker learned every replica's loss, its peers' too (an elastic resize
      // reports a step from them when the peer that computed some is lost).
      for (int w = 0; w < workers; ++w) {
        EXPECT_EQ(Bits(run.shared[w][s]), Bits(one.losses[s]))
            << workers << " workers, worker " << w << ", step " << s;
      }
    }
  }
  return one;
}

TEST(LogicalReplicas, SameBitsOnOneTwoThreeAndFourWorkers) {
  ASSERT_OK_AND_ASSIGN(Golden g, testing::ReadSpecGolden(kFile));
  ASSERT_EQ(g.spec.workers(), 4u);
  ExpectSameBitsOnAnyWorkerCount(g, testing::GoldenDataset(g.st, "data"));
}

// The same job in bfloat16 (model.dtype; docs/models.md#mixed-precision): the same kernels
// on every worker and exact sums of its float32 gradients, so the same bits too; its
// first step's losses within 1% of the float32 job's, the later ones (the runs drift
// apart, by bfloat16 rounding, step by step) within 10%.
TEST(LogicalReplicas, SameBitsOnOneTwoThreeAndFourWorkersInBfloat16) {
  const absl::Status bf16 = NewCpuBackend(kThreads)->Bf16Support();
  if (!bf16.ok()) GTEST_SKIP() << bf16.message();
  ASSERT_OK_AND_ASSIGN(Golden g, testing::ReadSpecGolden(kFile));
  g.spec.mutable_model()->set_dtype("bfloat16");
  ASSERT_OK_AND_ASSIGN(g.setup, SetupFromSpec(g.spec));
  ASSERT_TRUE(g.setup.model.HasBf16());
  const Dataset data = testing::GoldenDataset(g.st, "data");
  const JobRun run = ExpectSameBitsOnAnyWorkerCount(g, data);
  const std::vector<float> losses = *g.st.F32("train.losses");  // JAX's float32, [steps, V]
  const size_t v = g.spec.workers();
  for (size_t s = 0; s < run.losses.size(); ++s) {
    for (size_t r = 0; r < v; ++r) {
      EXPECT_NEAR(run.losses[s][r], losses[s * v + r],
                  (s == 0 ? 1e-2 : 0.1) * std::fabs(losses[s * v + r]))
          << "step " << s << " replica " << r;
    }
  }
  EXPECT_NE(run.losses.back(), std::vector<float>(losses.end() - v, losses.end()));
}

// DeviceExactSum's steps (Backend::ExactBlockExponents, ExactToFixed, ExactFromFixed,
// the int64 all-reduces on backend memory) give ExactSum's bits, on one worker and two.
TEST(LogicalReplicas, BackendMemoryExactSumIsTheHostsBits) {
  ASSERT_OK_AND_ASSIGN(Golden g, testing::ReadSpecGolden(kFile));
  const Dataset data = testing::GoldenDataset(g.st, "data");
  const JobRun host = RunJob(g, data, 1);
  ASSERT_OK(host.status[0]);
  for (int workers : {1, 2}) {
    const JobRun run = RunJob(g, data, workers, {.backend_memory = true});
    for (int w = 0; w < workers; ++w) {
      ASSERT_OK(run.status[w]);
      ExpectBitwiseEqual(run.states[w], host.states[0],
                         absl::StrCat(workers, " workers in backend memory, worker ", w));
    }
    for (size_t s = 0; s < host.losses.size(); ++s) {
      EXPECT_EQ(Bits(run.losses[s]), Bits(host.losses[s])) << workers << " workers, step " << s;
    }
  }
}

// The audit's ride-along replica (StepExecutor::RideAlong, docs/audit.md): on 2 workers
// (replicas [0, 2) and [2, 4)) each rides along the other's first replica, and one worker
// holding all 4 rides along replica 2: every ride-along's gradient and BatchNorm
// contribution digests and loss are bitwise those the replica's own worker taps, at every
// step (the exact sums in backend memory too), and the job's bits are those of a run
// without it.
void ExpectRideAlongIsTheReplicasBits(const Golden& g, const Dataset& data) {
  const JobRun plain = RunJob(g, data, 1);
  ASSERT_OK(plain.status[0]);
  const JobRun two = RunJob(g, data, 2, {.ride = {2, 0}});
  const JobRun one = RunJob(g, data, 1, {.ride = {2}});
  // The exact sums in backend memory, as on a CUDA worker.
  const JobRun device = RunJob(g, data, 2, {.backend_memory = true, .ride = {2, 0}});
  ASSERT_OK(two.status[0]);
  ASSERT_OK(two.status[1]);
  ASSERT_OK(one.status[0]);
  ASSERT_OK(device.status[0]);
  ASSERT_OK(device.status[1]);
  EXPECT_EQ(device.audit.ride, two.audit.ride);
  EXPECT_EQ(device.audit.first, two.audit.first);
  ExpectBitwiseEqual(two.states[0], plain.states[0], "2 workers with ride-alongs");
  ExpectBitwiseEqual(one.states[0], plain.states[0], "1 worker with a ride-along");
  const size_t steps = g.spec.steps();
  ASSERT_EQ(two.audit.ride[0].size(), steps);
  for (size_t s = 0; s < steps; ++s) {
    EXPECT_EQ(two.audit.ride[0][s], two.audit.first[1][s]) << "replica 2, step " << s;
    EXPECT_EQ(one.audit.ride[0][s], two.audit.first[1][s]) << "replica 2 on 1 worker, step " << s;
    EXPECT_EQ(two.audit.ride[1][s], two.audit.first[0][s]) << "replica 0, step " << s;
    EXPECT_EQ(one.audit.first[0][s], two.audit.first[0][s]) << "replica 0 on 1 worker, step " << s;
    // Different replicas differ: the digests see the rows (the statistics' too: they are
    // not all zeros).
    EXPECT_NE(two.audit.first[0][s].grads, two.audit.first[1][s].grads) << s;
    EXPECT_NE(two.audit.first[0][s].stats, two.audit.first[1][s].stats) << s;
  }
}

TEST(LogicalReplicas, RideAlongReplicaIsTheReplicasBits) {
  ASSERT_OK_AND_ASSIGN(Golden g, testing::ReadSpecGolden(kFile));
  ExpectRideAlongIsTheReplicasBits(g, testing::GoldenDataset(g.st, "data"));
}

TEST(LogicalReplicas, RideAlongReplicaIsTheReplicasBitsInBfloat16) {
  const absl::Status bf16 = NewCpuBackend(kThreads)->Bf16Support();
  if (!bf16.ok()) GTEST_SKIP() << bf16.message();
  ASSERT_OK_AND_ASSIGN(Golden g, testing::ReadSpecGolden(kFile));
  g.spec.mutable_model()->set_dtype("bfloat16");
  ASSERT_OK_AND_ASSIGN(g.setup, SetupFromSpec(g.spec));
  ExpectRideAlongIsTheReplicasBits(g, testing::GoldenDataset(g.st, "data"));
}

// A worker that lies in its BatchNorm contributions (a statistics fault: worker 1's, on
// every local replica's moments and sums) changes the job-wide statistics for everyone:
// the gradients of replica 2 agree with its ride-along on worker 0 (both computed from
// the same wrong sums), the statistics digest does not.
TEST(LogicalReplicas, RideAlongCatchesALieInTheStatistics) {
  ASSERT_OK_AND_ASSIGN(Golden g, testing::ReadSpecGolden(kFile));
  const Dataset data = testing::GoldenDataset(g.st, "data");
  RunOptions options{.ride = {2, 0}, .liar = 1};
  options.statistics_fault = [](Backend& b, float* x, size_t n) { return b.Divide(n, 0.99f, x); };
  const JobRun run = RunJob(g, data, 2, options);
  ASSERT_OK(run.status[0]);
  ASSERT_OK(run.status[1]);
  for (size_t s = 0; s < g.spec.steps(); ++s) {
    const ReplicaDigests &fed = run.audit.first[1][s], &ride = run.audit.ride[0][s];
    EXPECT_EQ(fed.grads, ride.grads) << "step " << s;
    EXPECT_EQ(fed.loss, ride.loss) << "step " << s;
    EXPECT_NE(fed.stats, ride.stats) << "step " << s;
  }
}

// The params whose gradient is zero but for rounding: the biases right before a BatchNorm
// (as golden_batchnorm_test.cc's).
bool ShiftedAway(const Model& m, const std::string& name) {
  for (size_t i = 0; i + 1 < m.layers().size(); ++i) {
    const Layer& l = m.layers()[i];
    if (l.bias >= 0 && m.layers()[i + 1].kind == LayerKind::kBatchNorm &&
        m.layout().entries()[l.bias].name == name) {
      return true;
    }
  }
  return false;
}

// Every tensor within 1e-5 (relative L2), the shifted-away biases within 1e-5 absolute.
void ExpectWithin1e5(const Model& m, const ParamLayout& layout, const std::vector<float>& got,
                     const std::vector<float>& want) {
  for (const ParamEntry& e : layout.entries()) {
    const std::span<const float> a(got.data() + e.offset, e.size),
        b(want.data() + e.offset, e.size);
    if (ShiftedAway(m, e.name)) {
      EXPECT_LE(testing::MaxAbsDiff(a, b), 1e-5) << e.name;
    } else {
      EXPECT_LE(testing::RelativeL2(a, b), 1e-5) << e.name;
    }
  }
}

TEST(LogicalReplicas, FourReplicasOnTwoWorkersMatchPmapOnFourDevices) {
  ASSERT_OK_AND_ASSIGN(Golden g, testing::ReadSpecGolden(kFile));
  const Model& m = g.setup.model;
  const Dataset data = testing::GoldenDataset(g.st, "data");
  const JobRun run = RunJob(g, data, 2);
  ASSERT_OK(run.status[0]);
  ASSERT_OK(run.status[1]);
  const std::vector<float> losses = *g.st.F32("train.losses");  // [steps, V]
  const size_t v = g.spec.workers();
  ASSERT_EQ(losses.size(), run.losses.size() * v);
  for (size_t s = 0; s < run.losses.size(); ++s) {
    for (size_t r = 0; r < v; ++r) {
      const float want = losses[s * v + r];
      EXPECT_NEAR(run.losses[s][r], want, 1e-5 * std::fabs(want))
          << "step " << s << " replica " << r;
    }
  }
  const TrainState& state = run.states[0];
  ExpectWithin1e5(m, m.layout(), state.params, GoldenParams(g.st, m, "train.params."));
  ASSERT_EQ(state.slots.size(), 1u);  // sgd's momentum
  ExpectWithin1e5(m, m.layout(), state.slots[0], GoldenParams(g.st, m, "train.trace."));
  std::vector<float> stats(m.stats_layout().total());
  for (const ParamEntry& e : m.stats_layout().entries()) {
    auto t = g.st.F32("train.stats." + e.name);
    ASSERT_TRUE(t.ok() && t->size() == e.size) << e.name;
    std::copy(t->begin(), t->end(), stats.begin() + e.offset);
  }
  ExpectWithin1e5(m, m.stats_layout(), state.batch_stats, stats);
}

TEST(LogicalReplicas, RejectsBadRangesAndSteps) {
  ASSERT_OK_AND_ASSIGN(Golden g, testing::ReadSpecGolden(kFile));
  const Model& m = g.setup.model;
  auto backend = NewCpuBackend(1);
  ASSERT_OK_AND_ASSIGN(auto exec, StepExecutor::Create(m, g.setup.optimizer, g.setup.impl, 4,
                                                       backend.get(), nullptr));
  const Dataset data = testing::GoldenDataset(g.st, "data");
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(data));
  ASSERT_OK(exec->SetState(
      TrainState::Create(m.Init(TrainingPlan::InitKey(1, g.setup.impl), g.setup.impl),
                         g.setup.optimizer, m.InitStats())));
  std::vector<int32_t> rows(16, 0);
  std::vector<rng::Key> keys(4);
  EXPECT_THAT(exec->StepReplicas(d, rows, keys),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("SetLogicalReplicas")));
  for (auto [total, first, count] :
       {std::tuple{4, 3, 2}, {4, -1, 1}, {4, 0, 0}, {0, 0, 1}, {4, 1, 2}}) {
    EXPECT_THAT(exec->SetLogicalReplicas(total, first, count),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("logical replicas")));
  }
  ASSERT_OK(exec->SetLogicalReplicas(4, 0, 4));
  EXPECT_THAT(exec->StepReplicas(d, std::span<const int32_t>(rows.data(), 8), keys),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("take 16 samples")));
  ASSERT_OK(exec->StepReplicas(d, rows, keys).status());
  EXPECT_EQ(exec->step(), 1);
}

}  // namespace
}  // namespace lockstep
