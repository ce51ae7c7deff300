// A golden file's spec trained on two replicas, as pmap over 2 devices runs it.
// Contract: golden_pmap.h.
#include "tests/golden_pmap.h"

#include <cmath>
#include <thread>

#include "core/plan.h"
#include "core/status_macros.h"
#include "core/store.h"
#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"
#include "workers/gloo/gloo_collective.h"

namespace lockstep::testing {
namespace {

void RunReplica(const SpecGolden& g, const Dataset& data, MemoryStore* store, int rank,
                std::optional<size_t> bucket_bytes, ReplicaRun* run) {
  run->status = [&]() -> absl::Status {
    const Model& m = g.setup.model;
    const int n = 2, b = static_cast<int>(g.spec.global_batch_size());
    GlooOptions options;
    options.hostname = "127.0.0.1";
    options.prefix = "golden_pmap";
    ASSIGN_OR_RETURN(auto collective, GlooCollective::Create(rank, n, store, options));
    auto backend = NewCpuBackend(1);
    ASSIGN_OR_RETURN(auto exec, StepExecutor::Create(m, g.setup.optimizer, g.setup.impl, b / n,
                                                     backend.get(), collective.get()));
    if (bucket_bytes.has_value()) exec->set_allreduce_bucket_bytes(*bucket_bytes);
    ASSIGN_OR_RETURN(DeviceDataset d, exec->Upload(data));
    TrainingPlan plan(g.spec.seed(), g.spec.dropout_seed(), g.setup.impl, data.size, b, n);
    RETURN_IF_ERROR(exec->SetState(TrainState::Create(m.Init(plan.init_key(), g.setup.impl),
                                                      g.setup.optimizer, m.InitStats())));
    for (uint64_t s = 0; s < g.spec.steps(); ++s) {
      const StepPlan p = plan.Next();
      ASSIGN_OR_RETURN(auto shards, ShardBatch(p.indices, n));
      ASSIGN_OR_RETURN(StepMetrics metrics, exec->Step(d, shards[rank], p.keys[rank]));
      run->losses.push_back(metrics.loss);
    }
    ASSIGN_OR_RETURN(run->state, exec->GetState());
    ASSIGN_OR_RETURN(run->eval, exec->Evaluate(d, 24));
    run->collective = std::move(collective);
    return absl::OkStatus();
  }();
}

}  // namespace

std::array<ReplicaRun, 2> RunTwoReplicas(const SpecGolden& g, const Dataset& data,
                                         std::optional<size_t> bucket_bytes) {
  MemoryStore store;
  std::array<ReplicaRun, 2> runs;
  std::thread peer(RunReplica, std::cref(g), std::cref(data), &store, 1, bucket_bytes, &runs[1]);
  RunReplica(g, data, &store, 0, bucket_bytes, &runs[0]);
  peer.join();
  return runs;
}

void ExpectMatchesPmap(const SpecGolden& g, const std::vector<float>& losses,
                       const TrainState& state) {
  const Model& m = g.setup.model;
  const std::vector<float> want = *g.st.F32("train.losses");
  ASSERT_EQ(losses.size(), want.size());
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_NEAR(losses[s], want[s], 1e-5 * std::fabs(want[s])) << "step " << s;
  }
  ExpectEveryTensorWithin(m, state.params, GoldenParams(g.st, m, "train.params."), 1e-5);
  ExpectEveryTensorWithin(m.stats_layout(), state.batch_stats,
                          GoldenLayoutTensors(g.st, m.stats_layout(), "train.stats."), 1e-5);
}

void ExpectTwoReplicasMatchPmap(const SpecGolden& g, const Dataset& data,
                                std::optional<size_t> bucket_bytes) {
  std::array<ReplicaRun, 2> runs = RunTwoReplicas(g, data, bucket_bytes);
  EXPECT_OK(runs[1].status);
  ASSERT_OK(runs[0].status);
  ASSERT_OK(runs[1].status);
  std::vector<float> losses;
  for (size_t s = 0; s < runs[0].losses.size(); ++s) {
    losses.push_back((runs[0].losses[s] + runs[1].losses[s]) / 2);
  }
  EXPECT_EQ(runs[0].state.params, runs[1].state.params);
  EXPECT_EQ(runs[0].state.batch_stats, runs[1].state.batch_stats);
  ExpectMatchesPmap(g, losses, runs[0].state);
  const float eval_loss = (*g.st.F32("eval.loss"))[0];
  EXPECT_NEAR(runs[0].eval.loss, eval_loss, 1e-5 * std::fabs(eval_loss));
  EXPECT_NEAR(runs[0].eval.accuracy, (*g.st.F32("eval.accuracy"))[0], 1e-6);
}

void ExpectTwoLogicalReplicasMatchPmap(const SpecGolden& g, const Dataset& data) {
  const Model& m = g.setup.model;
  const int n = 2, b = static_cast<int>(g.spec.global_batch_size());
  auto backend = NewCpuBackend(1);
  ASSERT_OK_AND_ASSIGN(auto exec, StepExecutor::Create(m, g.setup.optimizer, g.setup.impl, b / n,
                                                       backend.get(), nullptr));
  ASSERT_OK(exec->SetLogicalReplicas(n, 0, n));
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(data));
  TrainingPlan plan(g.spec.seed(), g.spec.dropout_seed(), g.setup.impl, data.size, b, n);
  ASSERT_OK(exec->SetState(
      TrainState::Create(m.Init(plan.init_key(), g.setup.impl), g.setup.optimizer, m.InitStats())));
  std::vector<float> losses;
  for (uint64_t s = 0; s < g.spec.steps(); ++s) {
    const StepPlan p = plan.Next();
    ASSERT_OK_AND_ASSIGN(StepMetrics metrics, exec->StepReplicas(d, p.indices, p.keys));
    losses.push_back(metrics.loss);
  }
  ASSERT_OK_AND_ASSIGN(TrainState state, exec->GetState());
  ExpectMatchesPmap(g, losses, state);
}

}  // namespace lockstep::testing
