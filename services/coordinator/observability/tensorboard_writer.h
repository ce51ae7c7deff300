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
// file is opened and appended to on `io`'s thread, each batch of what was queued meanwhile
// at once (core/io/append_file.h: whole records, or nothing). A write the disk refuses (a
// full disk) is kept (up to 64 MiB) and written again with the next batch: once
// there is room, the file holds every event as if the disk had never been full. The first
// failure of a streak is logged, and so is the write that ends it. Only a folder that
// leads out of the job's (INVALID_ARGUMENT) stops the writer for good.
//
// Thread safety: OnStep and OnEval from any thread. Create it with std::make_shared: the
// writes in flight hold it.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_OBSERVABILITY_TENSORBOARD_WRITER_H_
#define LOCKSTEP_SERVICES_COORDINATOR_OBSERVABILITY_TENSORBOARD_WRITER_H_

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/io/append_file.h"
#include "lockstep/v1/job.pb.h"
#include "services/common/rpc/serial_executor.h"
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
  // `open` opens the event file (tests inject a disk of their own).
  TensorBoardWriter(std::string root, std::string job_id, std::string name,
                    std::function<double(int64_t step)> learning_rate, SerialExecutor* io,
                    AppendFileOpener open = AppendFile::Open);
  ~TensorBoardWriter();

  void OnStep(const v1::StepEvent& step, int64_t unix_ms);
  void OnEval(const v1::EvalResult& eval, int64_t unix_ms);

  // The event file, once opened ("" before, or after an error).
  std::string path() const;

 private:
  void Queue(tensorboard::Event event);
  // On io's thread: writes what was queued, after what earlier writes could not.
  void Drain();
  // On io's thread: opens the file (its first record, the file version, goes first into
  // pending_). false when it cannot be opened now.
  bool Open();
  // On io's thread: a write failed (`permanent`: never try again).
  void Failed(const std::string& why, bool permanent);

  const std::string root_, job_id_, name_;
  const std::function<double(int64_t)> learning_rate_;
  SerialExecutor* const io_;
  const AppendFileOpener open_;
  mutable absl::Mutex mu_;
  std::vector<tensorboard::Event> queued_ ABSL_GUARDED_BY(mu_);
  bool drain_posted_ ABSL_GUARDED_BY(mu_) = false;
  bool over_cap_ ABSL_GUARDED_BY(mu_) = false;  // dropping events until the queue drains
  bool failed_ ABSL_GUARDED_BY(mu_) = false;    // for good: nothing more is written
  std::string path_ ABSL_GUARDED_BY(mu_);
  // io's thread only:
  std::unique_ptr<AppendFile> file_;
  std::string pending_;    // whole framed records not yet written
  int failed_writes_ = 0;  // of the current streak
  int64_t dropped_ = 0;    // events dropped meanwhile (pending_ was full)
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_OBSERVABILITY_TENSORBOARD_WRITER_H_
