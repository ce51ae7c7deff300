// TensorBoardWriter: one job's TensorBoard event file, written by the coordinator as the
// job's steps and evaluations come: train loss and accuracy, samples/s, the step's time
// split (compute, all-reduce, update, the worker's step and the coordinator's wall time),
// the learning rate, and the evaluations' loss and accuracy. The file is
// FOLDER/events.out.tfevents.<unix seconds>.<host>, TFRecord-framed Event protos
// (core/io/tfrecord.h), its first record the file version "brain.Event:2". Each writer
// (a job's run on this coordinator) makes a file of its own; a job resumed after a restart
// adds a new one beside the old (TensorBoard reads them in order and drops the replayed
// steps' old points).
//
// Writing never slows the job nor fails it: OnStep and OnEval only queue the values; the
// file is opened, written and flushed on `io`'s thread, each batch of what was queued
// meanwhile at once. The first error is logged, and the writer then drops what comes.
//
// Thread safety: OnStep and OnEval from any thread. Create it with std::make_shared: the
// writes in flight hold it.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_TENSORBOARD_WRITER_H_
#define LOCKSTEP_SERVICES_COORDINATOR_TENSORBOARD_WRITER_H_

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lockstep/v1/job.pb.h"
#include "services/common/serial_executor.h"
#include "tensorboard/event.pb.h"

namespace lockstep {

// Where job `job_id` writes its event files: ROOT/JOB/<name> (ROOT/JOB without a name),
// made if missing. INVALID_ARGUMENT naming tensorboard_dir when `name` is absolute, has a
// ".." or, symbolic links resolved, leads out of ROOT/JOB; the folders' errors otherwise.
absl::StatusOr<std::string> PrepareTensorBoardFolder(const std::string& root,
                                                     const std::string& job_id,
                                                     const std::string& name);

// The learning rate step `step` (1-based) updated with: the optimizer's schedule at count
// step - 1 (0 for a spec without a valid learning rate).
std::function<double(int64_t step)> LearningRateOf(const v1::OptimizerSpec& optimizer);

class TensorBoardWriter : public std::enable_shared_from_this<TensorBoardWriter> {
 public:
  // Writes into PrepareTensorBoardFolder(root, job_id, name), made on the first write.
  // `learning_rate` maps a step (1-based, as StepEvent.step) to the learning rate its
  // update used: LearningRateOf(the job's optimizer spec).
  TensorBoardWriter(std::string root, std::string job_id, std::string name,
                    std::function<double(int64_t step)> learning_rate, SerialExecutor* io);
  ~TensorBoardWriter();

  void OnStep(const v1::StepEvent& step, int64_t unix_ms);
  void OnEval(const v1::EvalResult& eval, int64_t unix_ms);

  // The event file, once opened ("" before, or after an error).
  std::string path() const;

 private:
  void Queue(tensorboard::Event event);
  // On io's thread: writes and flushes what was queued.
  void Drain();
  // On io's thread: opens the file and writes the file version. false after an error.
  bool Open();

  const std::string root_, job_id_, name_;
  const std::function<double(int64_t)> learning_rate_;
  SerialExecutor* const io_;
  mutable absl::Mutex mu_;
  std::vector<tensorboard::Event> queued_ ABSL_GUARDED_BY(mu_);
  bool drain_posted_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;  // an error was logged: nothing more is written
  std::string path_ ABSL_GUARDED_BY(mu_);
  std::FILE* file_ = nullptr;  // io's thread only
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_TENSORBOARD_WRITER_H_
