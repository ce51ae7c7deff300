#include "core/trainer.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/checkpoint.h"
#include "core/plan.h"
#include "core/spec/spec.h"
#include "core/status_macros.h"

namespace lockstep {

absl::StatusOr<TrainResult> Train(const v1::JobSpec& spec, Backend* backend,
                                  TrainObserver* observer) {
  ASSIGN_OR_RETURN(Model model, Model::FromSpec(spec.model()));
  ASSIGN_OR_RETURN(Optimizer optimizer, Optimizer::FromSpec(spec.optimizer()));
  ASSIGN_OR_RETURN(rng::Impl impl, rng::ParseImpl(spec.rng_impl()));
  ASSIGN_OR_RETURN(Dataset train, LoadIdxDataset(spec.dataset().path(), Split::kTrain));
  ASSIGN_OR_RETURN(Dataset test, LoadIdxDataset(spec.dataset().path(), Split::kTest));
  const int batch = static_cast<int>(spec.global_batch_size());
  if (batch > train.size) {
    return absl::InvalidArgumentError(absl::StrCat("global_batch_size: ", batch, " exceeds the ",
                                                   train.size, " training examples"));
  }
  TrainingPlan plan(spec.seed(), spec.dropout_seed(), impl, train.size, batch, 1);
  ASSIGN_OR_RETURN(auto exec,
                   StepExecutor::Create(model, optimizer, impl, batch, backend, nullptr));
  ASSIGN_OR_RETURN(DeviceDataset train_d, exec->Upload(train));
  ASSIGN_OR_RETURN(DeviceDataset test_d, exec->Upload(test));
  RETURN_IF_ERROR(exec->SetState(TrainState::Create(model.Init(plan.init_key(), impl), optimizer)));

  const int64_t total = TotalSteps(spec, train.size);
  const auto& ev = spec.eval();
  TrainResult result;
  double train_seconds = 0;
  for (int64_t i = 0; i < total; ++i) {
    StepPlan p = plan.Next();
    const auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(StepMetrics m, exec->Step(train_d, p.indices, p.keys[0]));
    train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result.final_train_loss = m.loss;
    const int64_t done = i + 1;
    if (observer != nullptr) {
      TrainProgress pr{done,
                       total,
                       p.epoch,
                       m.loss,
                       done * batch / train_seconds,
                       (total - done) * train_seconds / done};
      observer->OnStep(pr);
    }
    if (EvalDue(ev, done, plan.steps_per_epoch()) && done < total) {
      ASSIGN_OR_RETURN(EvalMetrics e, exec->Evaluate(test_d, ev.batch_size()));
      if (observer != nullptr) observer->OnEval(p.epoch, done, e);
    }
  }
  ASSIGN_OR_RETURN(result.test, exec->Evaluate(test_d, ev.batch_size()));
  if (observer != nullptr)
    observer->OnEval((total - 1) / plan.steps_per_epoch(), total, result.test);
  result.steps = total;
  result.train_seconds = train_seconds;
  result.samples_per_sec = train_seconds > 0 ? total * batch / train_seconds : 0;
  ASSIGN_OR_RETURN(result.state, exec->GetState());
  if (!spec.checkpoint_path().empty()) {
    RETURN_IF_ERROR(WriteCheckpoint(spec.checkpoint_path(), model, optimizer, result.state, {}));
  }
  return result;
}

}  // namespace lockstep
