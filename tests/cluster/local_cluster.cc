#include "tests/cluster/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "services/common/flags.h"
#include "services/common/job_state.h"
#include "services/common/net.h"
#include "services/common/status.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;

// Starts argv[0] with its output in `log`; the child is killed if this process dies, so
// that a crashed test leaves no servers behind.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

void Kill(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
}

}  // namespace

std::string BinaryPath(const std::string& name) {
  return std::string(LOCKSTEP_BINARY_DIR) + "/services/" + name;
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
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  c->threads_ = threads_per_worker;
  c->dir_ = (fs::temp_directory_path() /
             absl::StrCat("lockstep-cluster-", getpid(), "-", absl::ToUnixMicros(absl::Now())))
                .string();
  fs::create_directories(c->dir_);
  c->coordinator_flags_ = std::move(coordinator_flags);
  if (absl::Status st = c->StartCoordinator("127.0.0.1:0"); !st.ok()) return st;
  c->stub_ = v1::JobService::NewStub(MakeChannel(c->address_));
  for (int i = 0; i < workers; ++i) {
    auto w = c->AddWorker();
    if (!w.ok()) return w.status();
  }
  return c;
}

absl::Status LocalCluster::StartCoordinator(const std::string& listen) {
  const std::string port_file = dir_ + "/coordinator.port";
  fs::remove(port_file);
  std::vector<std::string> argv = {BinaryPath("lockstep-coordinator"), "--listen=" + listen,
                                   "--port_file=" + port_file, "--state_dir=" + dir_ + "/state"};
  argv.insert(argv.end(), coordinator_flags_.begin(), coordinator_flags_.end());
  auto pid = Spawn(argv, dir_ + "/coordinator.log");
  if (!pid.ok()) return pid.status();
  coordinator_ = *pid;
  const std::string port = ReadPortFile(port_file, absl::Seconds(20));
  if (port.empty()) return absl::UnavailableError("coordinator did not start:\n" + Logs());
  address_ = "127.0.0.1:" + port;
  return absl::OkStatus();
}

absl::Status LocalCluster::RestartCoordinator() {
  Kill(coordinator_);
  return StartCoordinator(address_);
}

absl::StatusOr<pid_t> LocalCluster::SpawnWorker(int index) {
  return Spawn({BinaryPath("lockstep-worker"), "--coordinator=" + address_, "--listen=127.0.0.1:0",
                "--advertise_host=127.0.0.1", absl::StrCat("--threads=", threads_),
                absl::StrCat("--name=worker-", index)},
               absl::StrCat(dir_, "/worker-", index, ".log"));
}

absl::StatusOr<std::string> LocalCluster::AddWorker() {
  const int index = static_cast<int>(workers_.size());
  auto before = Workers();
  const int had = before.ok() ? before->workers_size() : 0;
  auto pid = SpawnWorker(index);
  if (!pid.ok()) return pid.status();
  workers_.push_back(*pid);
  for (int i = 0; i < 300; ++i) {
    auto w = Workers();
    if (w.ok() && w->workers_size() > had) return w->workers(w->workers_size() - 1).id();
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::UnavailableError("worker did not register:\n" + Logs());
}

LocalCluster::~LocalCluster() {
  for (pid_t p : workers_) Kill(p);
  Kill(coordinator_);
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

void LocalCluster::KillWorker(int i) {
  kill(workers_[i], SIGKILL);
  int status;
  waitpid(workers_[i], &status, 0);
  workers_[i] = -1;
}

absl::StatusOr<v1::Job> LocalCluster::Submit(const v1::JobSpec& spec) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::Job job;
  absl::Status st = FromGrpcStatus(stub_->SubmitJob(&ctx, spec, &job));
  if (!st.ok()) return st;
  return job;
}

absl::StatusOr<v1::Job> LocalCluster::Cancel(const std::string& id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::CancelJobRequest req;
  req.set_id(id);
  v1::Job job;
  absl::Status st = FromGrpcStatus(stub_->CancelJob(&ctx, req, &job));
  if (!st.ok()) return st;
  return job;
}

absl::StatusOr<v1::Job> LocalCluster::Get(const std::string& id) {
  // Retried while UNAVAILABLE: the first call after a coordinator restart may still go
  // to the dead connection.
  absl::Status st;
  for (int attempt = 0; attempt < 50; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    ctx.set_wait_for_ready(true);
    v1::GetJobRequest req;
    req.set_id(id);
    v1::Job job;
    st = FromGrpcStatus(stub_->GetJob(&ctx, req, &job));
    if (st.ok()) return job;
    if (!absl::IsUnavailable(st)) return st;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return st;
}

absl::StatusOr<v1::Job> LocalCluster::WaitFor(const std::string& id, absl::Duration timeout,
                                              v1::JobState state) {
  const absl::Time end = absl::Now() + timeout;
  while (true) {
    auto job = Get(id);
    if (!job.ok()) return job.status();
    const auto s = job->state();
    if (s == state || IsTerminal(s)) return job;
    if (absl::Now() > end) {
      return absl::DeadlineExceededError(
          absl::StrCat("job ", id, " is still ", v1::JobState_Name(s), "\n", Logs()));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::StatusOr<v1::Job> LocalCluster::WaitForStep(const std::string& id, int64_t step,
                                                  absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (true) {
    auto job = Get(id);
    if (!job.ok()) return job.status();
    if (job->step() >= step) return job;
    const auto s = job->state();
    if (s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED) {
      return absl::FailedPreconditionError(absl::StrCat("job ", id, " ended ", v1::JobState_Name(s),
                                                        " at step ", job->step(), " before step ",
                                                        step, "\n", Logs()));
    }
    if (absl::Now() > end) {
      return absl::DeadlineExceededError(
          absl::StrCat("job ", id, " is at step ", job->step(), ", not ", step, "\n", Logs()));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::StatusOr<v1::ListWorkersResponse> LocalCluster::Workers() {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::ListWorkersResponse resp;
  absl::Status st = FromGrpcStatus(stub_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp));
  if (!st.ok()) return st;
  return resp;
}

std::string LocalCluster::Logs() const {
  std::string out;
  for (const auto& e : fs::directory_iterator(dir_)) {
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
