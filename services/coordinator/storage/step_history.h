// StepHistory: the per-step record a job keeps after it ends (step, epoch, loss, accuracy,
// samples/s and when), for WatchJob and what reads it (`watch`, `logs`, the Python client,
// examples/plot_loss.py), and written beside the job's record so that a restarted
// coordinator still has it.
//
// Bounded by a budget of points, thinned deterministically: every step is kept until
// there are more than `budget`; then only steps that are multiples of a stride (1, 2, 4,
// ...: doubled each time the points would exceed the budget) are kept, plus always the
// newest step. A job of T steps thus keeps every step if T <= budget, else the steps
// k * stride <= T and T, with stride the least power of two giving at most `budget`
// points: which steps are kept depends only on T and the budget, never on timing.
//
// A step run again (a replay after a recovery or a restart) replaces what was kept from
// that step on: the history holds each step's final run, with `replay` cleared.
//
// On disk it is a safetensors file (core/io/safetensors.h), written atomically and durably
// with SHA-256 digests of its header and of every tensor, checked on every read: a flipped
// byte is DATA_LOSS naming the file, as for snapshots and checkpoints.
//
// Not thread-safe: its owner guards it (JobManager: under mu_).
#ifndef LOCKSTEP_SERVICES_COORDINATOR_STORAGE_STEP_HISTORY_H_
#define LOCKSTEP_SERVICES_COORDINATOR_STORAGE_STEP_HISTORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lockstep/v1/job.pb.h"

namespace lockstep {

class StepHistory {
 public:
  static constexpr int64_t kDefaultBudget = 2000;

  // `budget` >= 2 points.
  explicit StepHistory(int64_t budget = kDefaultBudget);

  // Keeps a step event (JobEvent.step, with its unix_ms) as the rules above say.
  void Add(const v1::JobEvent& event);

  // The kept steps as step events (step, epoch, loss, accuracy, samples_per_sec,
  // total_steps; unix_ms), in ascending step order.
  std::vector<v1::JobEvent> Events() const;
  size_t size() const { return points_.size(); }
  bool empty() const { return points_.empty(); }
  int64_t stride() const { return stride_; }

  // Writes it to `path` (WriteFileDurably, with digests). DATA_LOSS or PERMISSION_DENIED
  // naming the file when the disk refuses.
  absl::Status Write(const std::string& path) const;
  // Reads one written by Write, thinned to `budget` if it holds more. NOT_FOUND when there
  // is no file; DATA_LOSS naming the file when a digest does not match or it is torn;
  // INVALID_ARGUMENT when it is not a step history.
  static absl::StatusOr<StepHistory> Read(const std::string& path, int64_t budget = kDefaultBudget);

 private:
  struct Point {
    int64_t step = 0;
    int64_t epoch = 0;
    int64_t total_steps = 0;
    int64_t unix_ms = 0;
    float loss = 0;
    float accuracy = 0;
    float samples_per_sec = 0;
  };
  void Keep(const Point& p);
  // Doubles the stride while there are more points than the budget.
  void Thin();

  int64_t budget_;
  int64_t stride_ = 1;
  std::vector<Point> points_;  // ascending step
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_STORAGE_STEP_HISTORY_H_
