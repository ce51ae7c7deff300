#include "tests/golden_pmap.h"

#include <thread>

#include "core/plan.h"
#include "core/status_macros.h"
#include "core/store.h"
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

}  // namespace lockstep::testing
