// JobManager::Start: the records a previous coordinator left, taken up again. Finished jobs
// come back as they ended (a pending final checkpoint retried); queued ones stay queued; a
// job that was running is RECOVERING at the step of its newest snapshot, to continue from
// it, its steps since then replayed.
#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "services/common/rpc/job_state.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_internal.h"
#include "services/coordinator/storage/snapshot_store.h"

namespace lockstep {
using job_manager_internal::RequestKey;
using job_manager_internal::StateEvent;

absl::Status JobManager::Start() {
  ASSIGN_OR_RETURN(std::vector<v1::Job> saved, records_.Load());
  ASSIGN_OR_RETURN(const int64_t next_id, records_.LoadNextId());
  // Each job's steps and witness as last saved; a damaged one is dropped, not shown.
  std::vector<StepHistory> histories;
  std::vector<std::vector<v1::SnapshotMark>> witnesses;
  for (const v1::Job& job : saved) {
    absl::StatusOr<StepHistory> h = records_.LoadHistory(job.id(), options_.history_steps);
    if (!h.ok()) {
      LogJob(spdlog::level::warn, {job.id()},
             absl::StrCat("its step history is dropped: ", h.status().ToString()));
    }
    histories.push_back(h.ok() ? *std::move(h) : StepHistory(options_.history_steps));
    absl::StatusOr<std::vector<v1::SnapshotMark>> w = records_.LoadWitness(job.id());
    if (!w.ok()) {
      LogJob(spdlog::level::warn, {job.id()},
             absl::StrCat("its witness is dropped: ", w.status().ToString()));
    }
    witnesses.push_back(w.ok() ? *std::move(w) : std::vector<v1::SnapshotMark>());
  }
  std::vector<Save> saves;
  std::vector<std::string> forgotten;
  int64_t next = 0;
  {
    absl::MutexLock lock(&mu_);
    next_id_ = std::max(next_id_, next_id);
    for (size_t i = 0; i < saved.size(); ++i) {
      auto rec = std::make_unique<Record>();
      const v1::JobState was = saved[i].state();
      rec->job = std::move(saved[i]);
      rec->history = std::move(histories[i]);
      rec->witness = std::move(witnesses[i]);
      rec->version = rec->persisted = 1;
      rec->log = std::make_shared<EventLog>(options_.history_bytes, &notifier_);
      rec->logs = NewLogs(rec->job.id());
      const std::string id = rec->job.id();
      metrics_->JobStateChanged(v1::JOB_STATE_UNSPECIFIED, was);
      if (id.rfind("job-", 0) == 0)
        next_id_ = std::max<int64_t>(next_id_, std::atoll(id.c_str() + 4) + 1);
      if (!rec->job.spec().request_id().empty())
        by_request_id_[RequestKey(rec->job.owner(), rec->job.spec().request_id())] = id;
      if (IsTerminal(was)) {  // its final event, for watchers; the record stays as it was
        KeepPendingCheckpointLocked(*rec);
        rec->log->Append(StateEvent(was, rec->job.failure_reason()));
        rec->log->Close();
        rec->log->Compact(rec->history.Events());
        rec->logs->Close();
      } else {
        rec->tensorboard = NewTensorBoardWriter(rec->job);
        // Nothing is lost: a job that was running continues from its latest snapshot, and
        // shows it (RECOVERING at that step) until it has workers.
        if (was != v1::QUEUED) {
          rec->resume = true;
          rec->job.set_recoveries(rec->job.recoveries() + 1);
          metrics_->Recovery();
          rec->job.clear_workers();
          rec->high_water = rec->job.step();
          int64_t from = 0;
          if (!options_.snapshot_dir.empty()) {
            const std::vector<int64_t> steps =
                SnapshotStore(options_.snapshot_dir + "/" + id, 1).Steps();
            if (!steps.empty()) from = steps.back();
          }
          rec->job.set_step(from);
          rec->job.set_snapshot_step(from);
          // The steps it continues from, for watchers resuming below them; later ones are
          // computed again and shown as they come.
          for (v1::JobEvent& e : rec->history.Events()) {
            if (e.step().step() <= from) rec->log->Append(std::move(e));
          }
          SetStateLocked(*rec, v1::RECOVERING,
                         absl::UnavailableError(
                             absl::StrCat("the coordinator restarted: the job continues from step ",
                                          from, " once it has workers")),
                         &saves);
        } else {
          SetStateLocked(*rec, v1::QUEUED, absl::OkStatus(), &saves);
        }
        queue_.push_back(id);
      }
      jobs_[id] = std::move(rec);
    }
  }
  Persist(std::move(saves));
  {
    absl::MutexLock lock(&mu_);
    forgotten = ForgetOldLocked();
    next = next_id_;
  }
  Forget(std::move(forgotten), next);
  scheduler_ = std::thread([this] { SchedulerLoop(); });
  return absl::OkStatus();
}

}  // namespace lockstep
