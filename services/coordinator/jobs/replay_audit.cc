// The replay audit (replay_audit.h): one job's steps replayed on a lent worker alone.
#include "services/coordinator/jobs/replay_audit.h"

#include <sys/resource.h>

#include <algorithm>
#include <deque>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/plan.h"
#include "core/spec/spec.h"
#include "core/status_macros.h"
#include "services/coordinator/jobs/logical_dispatch.h"
#include "services/coordinator/jobs/step_fanout.h"

namespace lockstep {
namespace {

constexpr absl::Duration kStreamLifetime = absl::Hours(24 * 30);

// The replay's steps on its one stream, pipelined as the job's; the checksum at the last.
absl::StatusOr<uint64_t> RunSteps(StepFanout& fanout, const ReplayRequest& r, int64_t num_train,
                                  const CoordinatorOptions& options) {
  const v1::JobSpec& spec = r.spec;
  const bool logical = spec.replicas() > 0;
  TrainingPlan plan(spec.seed(), spec.dropout_seed(), r.impl, num_train,
                    static_cast<int>(spec.global_batch_size()), logical ? LogicalWorld(spec) : 1);
  for (int64_t s = 0; s < r.from; ++s) plan.Next();
  std::deque<StepPlan> in_flight;  // the commands' rows point into these until answered
  int64_t sent = r.from;
  uint64_t checksum = 0;
  for (int64_t done = r.from; done < r.to;) {
    while (sent < r.to && sent - done < options.steps_in_flight) {
      in_flight.push_back(plan.Next());
      const StepPlan& p = in_flight.back();
      StepCommand c;
      c.step = p.step;
      c.want_checksum = sent + 1 == r.to;
      c.collective_timeout = options.collective_timeout;
      c.data_key = p.data_key;
      std::vector<WorkerShare> shares;
      if (logical) {
        ASSIGN_OR_RETURN(shares, ShareStep(p, 1, LogicalWorld(spec)));
        c.indices = shares[0].rows;
        c.keys = shares[0].keys;
      } else {
        c.indices = p.indices;
        c.key = p.keys[0];
      }
      fanout.Send({c});
      ++sent;
    }
    ASSIGN_OR_RETURN(std::vector<StepResult> got, fanout.Take(done, options.step_timeout));
    in_flight.pop_front();
    checksum = got[0].param_checksum;
    ++done;
  }
  RETURN_IF_ERROR(fanout.Close(options.step_timeout));
  return checksum;
}

}  // namespace

absl::StatusOr<uint64_t> Replay(std::unique_ptr<WorkerClient> connected, const ReplayRequest& r,
                                const CoordinatorOptions& options, const CancelToken& cancel) {
  std::vector<std::unique_ptr<WorkerClient>> clients;
  clients.push_back(std::move(connected));
  WorkerClient& client = *clients[0];
  JobAssignment assignment;
  assignment.job_id = r.job_id;
  assignment.replica = {r.spec, 0, 1, options.collective_timeout};
  if (r.spec.replicas() > 0) {  // all V on the one worker
    assignment.replica.logical_replicas = LogicalWorld(r.spec);
    assignment.replica.logical_first = 0;
    assignment.replica.logical_count = LogicalWorld(r.spec);
  }
  ASSIGN_OR_RETURN(PrepareResult prepared,
                   client.Prepare(assignment, r.base, cancel, options.prepare_timeout));
  absl::StatusOr<uint64_t> checksum = [&]() -> absl::StatusOr<uint64_t> {
    ASSIGN_OR_RETURN(std::unique_ptr<StepFanout> fanout,
                     StepFanout::Open(clients, r.job_id, cancel, kStreamLifetime,
                                      [](int, const absl::Status& st) { return st; }));
    return RunSteps(*fanout, r, prepared.train_examples, options);
  }();
  client.Release(r.job_id, "replay audit done", options.release_timeout).IgnoreError();
  return checksum;
}

ReplayAuditor::ReplayAuditor(WorkerClientFactory* factory, WorkerSupply* supply,
                             const CoordinatorOptions& options, const CancelToken* attempt)
    : factory_(factory), supply_(supply), options_(options), attempt_(attempt) {}

ReplayAuditor::~ReplayAuditor() { Stop(); }

std::string CheckerName(const ReplayVerdict& v) {
  return v.local ? "the coordinator's replica" : absl::StrCat("worker ", v.checker.id);
}

void ReplayAuditor::Start(PoolWorker checker, ReplayRequest request) {
  ReplayVerdict v{request.from, request.to, std::move(checker), false, request.checksum};
  std::unique_ptr<WorkerClient> client = factory_->Connect(v.checker.address);
  Run(std::move(v), std::move(client), std::move(request));
}

void ReplayAuditor::StartLocal(std::unique_ptr<WorkerClient> replica, ReplayRequest request) {
  ReplayVerdict v{request.from, request.to, {}, true, request.checksum};
  Run(std::move(v), std::move(replica), std::move(request));
}

void ReplayAuditor::Run(ReplayVerdict verdict, std::unique_ptr<WorkerClient> client,
                        ReplayRequest request) {
  on_attempt_cancel_ = {};  // the previous replay's
  cancel_ = std::make_unique<CancelToken>();
  on_attempt_cancel_ = attempt_->OnCancel(
      [c = cancel_.get()] { c->Cancel(absl::CancelledError("the job's attempt ended")); });
  {
    absl::MutexLock lock(&mu_);
    verdict_.reset();
  }
  thread_ = std::thread(
      [this, v = std::move(verdict), client = std::move(client), r = std::move(request)]() mutable {
        // The coordinator's replica computes below the control plane: the threads its replay
        // starts from here (the step stream's, the CPU backend's OpenMP team) inherit it.
        if (v.local) {
          const int nice = getpriority(PRIO_PROCESS, 0);  // this thread's (Linux)
          setpriority(PRIO_PROCESS, 0, std::min(19, nice + kLocalReplicaNice));
        }
        absl::StatusOr<uint64_t> got = Replay(std::move(client), r, options_, *cancel_);
        if (got.ok()) {
          v.got = *got;
          v.agreed = v.got == r.checksum;
        } else {
          v.status = got.status();
        }
        absl::MutexLock lock(&mu_);
        verdict_ = std::move(v);
      });
}

ReplayVerdict ReplayAuditor::Join() {
  thread_.join();
  absl::MutexLock lock(&mu_);
  ReplayVerdict v = *std::move(verdict_);
  verdict_.reset();
  if (!v.local) supply_->ReturnWorker(v.checker);
  return v;
}

std::optional<ReplayVerdict> ReplayAuditor::Poll() {
  if (!busy()) return std::nullopt;
  {
    absl::MutexLock lock(&mu_);
    if (!verdict_.has_value()) return std::nullopt;
  }
  return Join();
}

ReplayVerdict ReplayAuditor::Wait() { return Join(); }

void ReplayAuditor::Stop() {
  if (!busy()) return;
  cancel_->Cancel(absl::CancelledError("the replay audit's attempt ended"));
  Join();
}

}  // namespace lockstep
