// JobManager's retention: which finished jobs are forgotten (each owner's oldest past that
// owner's max_jobs_kept, never another owner's), and their records and snapshots erased.
#include <spdlog/spdlog.h>

#include <map>

#include "services/common/rpc/job_state.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_internal.h"
#include "services/coordinator/storage/snapshot_store.h"

namespace lockstep {
using job_manager_internal::RequestKey;

void JobManager::Forget(std::vector<std::string> ids, int64_t next_id) {
  if (ids.empty()) return;
  // The next id first: were the records erased and the coordinator killed before it was
  // on disk, a restart could hand their ids out again.
  if (absl::Status st = records_.SaveNextId(next_id); !st.ok()) {
    spdlog::error("job ids: {}", st.ToString());
    return;  // the records stay: their ids keep the next one above them
  }
  for (const std::string& id : ids) {
    records_.Erase(id).IgnoreError();
    if (!options_.snapshot_dir.empty()) SnapshotStore(options_.snapshot_dir + "/" + id, 1).Clear();
  }
}

bool JobManager::ForgettableLocked(const Record& rec) const {
  return IsTerminal(rec.job.state()) && rec.persisted == rec.version && rec.pending_saves == 0 &&
         !rec.runner && !rec.thread.joinable();
}

std::string JobManager::ForgetLocked(JobMap::iterator it) {
  const Record& rec = *it->second;
  by_request_id_.erase(RequestKey(rec.job.owner(), rec.job.spec().request_id()));
  {
    absl::MutexLock logs_lock(&logs_mu_);
    logs_.erase(it->first);
  }
  metrics_->JobStateChanged(rec.job.state(), v1::JOB_STATE_UNSPECIFIED);
  metrics_->JobForgotten(it->first);
  std::string id = it->first;
  jobs_.erase(it);
  return id;
}

std::vector<std::string> JobManager::ForgetOldLocked() {
  // Each owner's finished jobs, against that owner's retention only.
  std::map<std::string, int> finished;
  for (const auto& [id, rec] : jobs_) {
    if (IsTerminal(rec->job.state())) ++finished[rec->job.owner()];
  }
  std::vector<std::string> forgotten;
  for (auto it = jobs_.begin(); it != jobs_.end();) {  // oldest first (ids in job order)
    const Record& rec = *it->second;
    if (!IsTerminal(rec.job.state())) {
      ++it;
      continue;
    }
    int& left = finished[rec.job.owner()];
    if (left > options_.user_limits.For(rec.job.owner()).max_jobs_kept && ForgettableLocked(rec)) {
      --left;
      forgotten.push_back(ForgetLocked(it++));
    } else {
      ++it;
    }
  }
  return forgotten;
}

}  // namespace lockstep
