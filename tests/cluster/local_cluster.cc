// LocalCluster: a coordinator and N workers as processes on loopback, for integration
// tests. Contract: local_cluster.h.
#include "tests/cluster/local_cluster.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "services/common/flags.h"
#include "services/common/rpc/job_state.h"
#include "services/common/rpc/net.h"
#include "services/common/rpc/status.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;

// One unary JobService call, waiting for the coordinator to be reachable within `timeout`.
template <typename Request, typename Response>
absl::StatusOr<Response> Call(grpc::Status (v1::JobService::Stub::*method)(grpc::ClientContext*,
                                                                           const Request&,
                                                                           Response*),
                              v1::JobService::Stub& stub, const Request& request,
                              absl::Duration timeout = absl::Seconds(30)) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  ctx.set_wait_for_ready(true);
  Response response;
  absl::Status st = FromGrpcStatus((stub.*method)(&ctx, request, &response));
  if (!st.ok()) return st;
  return response;
}

}  // namespace

std::string BinaryPath(const std::string& name) {
  const char* dir = std::getenv("LOCKSTEP_BIN_DIR");
  return (dir != nullptr && dir[0] != '\0' ? std::string(dir)
                                           : std::string(LOCKSTEP_BINARY_DIR) + "/services") +
         "/" + name;
}

v1::JobSpec MlpSpec(int workers, int steps, double dropout_rate, int batch) {
  v1::JobSpec spec;
  spec.mutable_model()->set_kind("mlp");
  spec.mutable_model()->add_hidden(64);
  spec.mutable_model()->add_hidden(32);
  spec.mutable_model()->set_dropout_rate(dropout_rate);
  spec.mutable_optimizer()->set_kind("adam");
  spec.mutable_optimizer()->set_learning_rate(1e-3);
  spec.set_global_batch_size(batch);
  spec.set_steps(steps);
  spec.set_workers(workers);
  return spec;
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    int workers, std::vector<std::string> coordinator_flags, int threads_per_worker) {
  ClusterOptions options;
  options.workers = workers;
  options.threads_per_worker = threads_per_worker;
  options.coordinator_flags = std::move(coordinator_flags);
  return Start(std::move(options));
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(ClusterOptions options) {
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  c->dir_ = (fs::temp_directory_path() /
             absl::StrCat("lockstep-cluster-", getpid(), "-", absl::ToUnixMicros(absl::Now())))
                .string();
  options.dir = c->dir_;
  options.coordinator_binary = BinaryPath("lockstep-coordinator");
  options.worker_binary = BinaryPath("lockstep-worker");
  auto processes = ClusterProcesses::Start(options);
  if (!processes.ok()) {
    return absl::Status(processes.status().code(),
                        absl::StrCat(processes.status().message(), "\n", c->Logs()));
  }
  c->processes_ = std::move(processes).value();
  c->stub_ = v1::JobService::NewStub(c->processes_->Channel());
  return c;
}

LocalCluster::~LocalCluster() {
  processes_.reset();  // kills the servers
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

absl::StatusOr<v1::Job> LocalCluster::Submit(const v1::JobSpec& spec) {
  return Call(&v1::JobService::Stub::SubmitJob, *stub_, spec);
}

absl::StatusOr<v1::Job> LocalCluster::Cancel(const std::string& id) {
  v1::CancelJobRequest req;
  req.set_id(id);
  return Call(&v1::JobService::Stub::CancelJob, *stub_, req);
}

absl::StatusOr<v1::Job> LocalCluster::Get(const std::string& id) {
  v1::GetJobRequest req;
  req.set_id(id);
  // Retried while UNAVAILABLE: the first call after a coordinator restart may still go
  // to the dead connection.
  absl::StatusOr<v1::Job> job;
  for (int attempt = 0; attempt < 50; ++attempt) {
    job = Call(&v1::JobService::Stub::GetJob, *stub_, req);
    if (!absl::IsUnavailable(job.status())) break;
  }
  return job;
}

absl::StatusOr<v1::Job> LocalCluster::WatchUntil(
    const std::string& id, absl::Duration timeout,
    const std::function<bool(const v1::JobEvent&)>& done) {
  const absl::Time end = absl::Now() + timeout;
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(end));
    v1::WatchJobRequest req;
    req.set_id(id);
    auto reader = stub_->WatchJob(&ctx, req);
    v1::JobEvent e;
    bool hit = false;
    while (!hit && reader->Read(&e)) hit = done(e);
    if (hit) ctx.TryCancel();
    const absl::Status st = FromGrpcStatus(reader->Finish());
    if (hit || st.ok()) return Get(id);
    // Watcher slots that a test's cancelled streams held come free a moment later; a
    // restarted coordinator is back a moment later (the history is streamed again).
    if ((absl::IsResourceExhausted(st) || absl::IsUnavailable(st)) && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(50));
      continue;
    }
    return absl::Status(st.code(),
                        absl::StrCat("watching job ", id, ": ", st.message(), "\n", Logs()));
  }
}

absl::StatusOr<v1::Job> LocalCluster::WaitFor(const std::string& id, absl::Duration timeout,
                                              v1::JobState state) {
  return WatchUntil(id, timeout, [state](const v1::JobEvent& e) {
    return e.has_state() && (e.state().state() == state || IsTerminal(e.state().state()));
  });
}

absl::StatusOr<v1::Job> LocalCluster::WaitForStep(const std::string& id, int64_t step,
                                                  absl::Duration timeout) {
  auto job = WatchUntil(id, timeout, [step](const v1::JobEvent& e) {
    return e.has_step() && e.step().step() >= step;
  });
  if (!job.ok() || job->step() >= step) return job;
  return absl::FailedPreconditionError(
      absl::StrCat("job ", id, " ended ", v1::JobState_Name(job->state()), " at step ", job->step(),
                   " before step ", step, "\n", Logs()));
}

absl::StatusOr<std::vector<v1::JobEvent>> LocalCluster::Events(const std::string& id) {
  std::vector<v1::JobEvent> events;
  auto job = WatchUntil(id, absl::Minutes(10), [&](const v1::JobEvent& e) {
    events.push_back(e);
    return false;
  });
  if (!job.ok()) return job.status();
  return events;
}

absl::StatusOr<v1::ListWorkersResponse> LocalCluster::Workers() {
  return Call(&v1::JobService::Stub::ListWorkers, *stub_, v1::ListWorkersRequest());
}

absl::StatusOr<int> LocalCluster::WorkerOf(const std::string& job_id) {
  ASSIGN_OR_RETURN(v1::Job job, Get(job_id));
  ASSIGN_OR_RETURN(v1::ListWorkersResponse workers, Workers());
  for (const v1::WorkerInfo& w : workers.workers()) {
    int index;  // workers are named worker-<index>
    if (job.workers_size() > 0 && w.id() == job.workers(0) &&
        absl::SimpleAtoi(w.name().substr(w.name().rfind('-') + 1), &index)) {
      return index;
    }
  }
  return absl::NotFoundError(absl::StrCat(job_id, " runs on no worker now"));
}

std::string LocalCluster::Logs() const {
  std::string out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(dir_) / "logs", ec)) {
    if (e.path().extension() != ".log") continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    if (text.size() > 4000) text = "..." + text.substr(text.size() - 4000);
    absl::StrAppend(&out, "--- ", e.path().filename().string(), "\n", text);
  }
  return out;
}

}  // namespace lockstep::testing
