// The single-process trainer: the job loop with N = 1 and no network. It follows the
// same TrainingPlan and runs the same StepExecutor as a cluster's coordinator and
// workers, so `lockstep train` and a 1-worker job produce the same parameters.
#ifndef LOCKSTEP_CORE_TRAINER_H_
#define LOCKSTEP_CORE_TRAINER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/step.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

struct TrainProgress {
  int64_t step = 0;  // steps done
  int64_t total = 0;
  int64_t epoch = 0;
  float loss = 0;  // of the last step
  double samples_per_sec = 0;
  double eta_sec = 0;
};

struct TrainResult {
  EvalMetrics test;
  float final_train_loss = 0;
  int64_t steps = 0;
  double samples_per_sec = 0;  // training steps only, evaluation excluded
  double train_seconds = 0;
  TrainState state;
};

class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void OnStep(const TrainProgress& p) {}
  virtual void OnEval(int64_t epoch, int64_t step, const EvalMetrics& m) {}
};

// Runs a validated spec (see spec.h) on `backend`. Writes spec.checkpoint_path when set.
absl::StatusOr<TrainResult> Train(const v1::JobSpec& spec, Backend* backend,
                                  TrainObserver* observer);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_TRAINER_H_
