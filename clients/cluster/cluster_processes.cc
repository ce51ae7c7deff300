// ClusterProcesses: a local cluster's servers as processes on loopback — a coordinator and N
// workers with free ports, each one's output in a log file — started, grown, killed, restarted (by
// a Supervisor) and stopped. Contract: cluster_processes.h.
#include "clients/cluster/cluster_processes.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lockstep/v1/job.grpc.pb.h"
#include "services/common/flags.h"
#include "services/common/rpc/net.h"
#include "services/common/rpc/status.h"
#include "services/common/security/credentials.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

constexpr absl::Duration kStartTimeout = absl::Seconds(60);  // per server

}  // namespace

absl::StatusOr<pid_t> SpawnServer(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {  // only async-signal-safe calls until exec
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    setpgid(0, 0);  // Ctrl-C reaches the launcher only, which stops the servers in order
    // (The death signal follows the forking thread: ClusterProcesses is used from one.)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    const int in = open("/dev/null", O_RDONLY);
    // A server's log names jobs and users: its owner's only, also when it was left looser.
    const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (in >= 0) dup2(in, 0);
    if (out >= 0) {
      fchmod(out, 0600);
      dup2(out, 1);
      dup2(out, 2);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

bool Running(pid_t pid) {
  if (pid <= 0) return false;
  int status;
  if (waitpid(pid, &status, WNOHANG) == pid) return false;  // our child, exited
  if (kill(pid, 0) != 0) return false;
  // Someone else's child that exited stays a zombie until its parent reaps it (never, under
  // an init that does not reap): it runs no more.
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');  // the state follows "pid (comm) "
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'Z';
}

bool AwaitExit(pid_t pid, absl::Duration timeout) {
  if (pid <= 0) return true;
  // A pidfd becomes readable when its process exits, ours (a zombie until reaped, which this
  // leaves to the caller) or not: no polling.
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;  // gone already
  pollfd exited = {fd, POLLIN, 0};
  const absl::Time end = absl::Now() + timeout;
  int rc;
  do {
    const int64_t ms = absl::ToInt64Milliseconds(
        absl::Ceil(std::max(absl::ZeroDuration(), end - absl::Now()), absl::Milliseconds(1)));
    rc = poll(&exited, 1, static_cast<int>(std::min<int64_t>(ms, INT32_MAX)));
  } while (rc < 0 && errno == EINTR);
  close(fd);
  return rc > 0;
}

void StopProcesses(const std::vector<pid_t>& pids, absl::Duration grace) {
  for (pid_t p : pids) {
    if (p > 0) kill(p, SIGTERM);
  }
  const absl::Time end = absl::Now() + grace;
  for (pid_t p : pids) {
    if (!AwaitExit(p, end - absl::Now())) kill(p, SIGKILL);
    if (p > 0) waitpid(p, nullptr, 0);  // reaps our children; no-op for others
  }
}

absl::StatusOr<std::unique_ptr<ClusterProcesses>> ClusterProcesses::Start(
    const ClusterOptions& options) {
  std::unique_ptr<ClusterProcesses> c(new ClusterProcesses(options));
  std::error_code ec;
  fs::create_directories(fs::path(options.dir) / "logs", ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat(options.dir, ": ", ec.message()));
  // Its credentials, state and logs are the owner's only (the coordinator tightens state/).
  for (const fs::path& d : {fs::path(options.dir), fs::path(options.dir) / "logs"}) {
    fs::permissions(d, fs::perms::owner_all, ec);
    if (ec) return absl::FailedPreconditionError(absl::StrCat(d.string(), ": ", ec.message()));
  }
  if (!options.insecure) {
    if (absl::Status st = MakeCredentials({c->credentials_dir(), {}, options.users}); !st.ok()) {
      return st;
    }
  }
  if (absl::Status st = c->StartCoordinator(options.port); !st.ok()) return st;
  // One at a time, so that worker ids follow start order (w0000 is the first started).
  for (int i = 0; i < options.workers; ++i) {
    if (absl::StatusOr<std::string> id = c->AddWorker(); !id.ok()) return id.status();
  }
  return c;
}

ClusterProcesses::~ClusterProcesses() { Stop(absl::ZeroDuration()); }

std::vector<pid_t> ClusterProcesses::pids() const {
  std::vector<pid_t> out = {coordinator_};
  out.insert(out.end(), workers_.begin(), workers_.end());
  return out;
}

std::string ClusterProcesses::credentials_dir() const {
  return options_.insecure ? "" : (fs::path(options_.dir) / "credentials").string();
}

std::shared_ptr<grpc::Channel> ClusterProcesses::Channel(const std::string& user) const {
  if (options_.insecure) return MakeChannel(address_, Transport::Plaintext(), "");
  std::ifstream in(TokenFile(credentials_dir(), user));
  std::string token;
  in >> token;
  absl::StatusOr<Transport> t = Transport::Tls(ClientTls(credentials_dir()));
  return MakeChannel(address_, t.ok() ? *t : Transport::Plaintext(), kCoordinatorIdentity, token);
}

std::vector<std::string> ClusterProcesses::SecurityFlags(const TlsFiles& files) const {
  if (options_.insecure) return {"--insecure"};
  return {"--tls_ca=" + files.ca, "--tls_cert=" + files.cert, "--tls_key=" + files.key};
}

std::string ClusterProcesses::MetricsPortFile(const std::string& name) const {
  return (fs::path(options_.dir) / (name + ".metrics_port")).string();
}

std::vector<std::string> ClusterProcesses::MetricsFlags(const std::string& name) const {
  if (!options_.metrics) return {};
  fs::remove(MetricsPortFile(name));
  return {"--metrics_listen=127.0.0.1:0", "--metrics_port_file=" + MetricsPortFile(name)};
}

std::vector<std::string> ClusterProcesses::MetricsAddresses() const {
  std::vector<std::string> out;
  if (!options_.metrics) return out;
  const std::vector<pid_t> running = pids();
  for (int i = 0; i < ServerCount(); ++i) {
    const std::string port =
        running[i] > 0 ? ReadPortFile(MetricsPortFile(ServerName(i)), absl::ZeroDuration()) : "";
    out.push_back(port.empty() ? "" : "127.0.0.1:" + port);
  }
  return out;
}

std::string ClusterProcesses::DashboardPortFile() const {
  return (fs::path(options_.dir) / "coordinator.dashboard_port").string();
}

std::string ClusterProcesses::DashboardUrl() const {
  if (!options_.dashboard || dashboard_port_ == 0) return "";
  return absl::StrCat(options_.insecure ? "http" : "https", "://127.0.0.1:", dashboard_port_, "/");
}

absl::StatusOr<pid_t> ClusterProcesses::SpawnCoordinator(int port) {
  const std::string port_file = (fs::path(options_.dir) / "coordinator.port").string();
  fs::remove(port_file);
  std::vector<std::string> argv = {
      options_.coordinator_binary, absl::StrCat("--listen=127.0.0.1:", port),
      "--state_dir=" + options_.dir + "/state", "--port_file=" + port_file};
  for (std::string& flag : SecurityFlags(CoordinatorTls(credentials_dir()))) {
    argv.push_back(std::move(flag));
  }
  if (!options_.insecure) {
    argv.push_back("--tokens_file=" + TokensFile(credentials_dir()));
    // Workers started by hand with the bootstrap token enroll (CONFIGURATION.md).
    argv.push_back("--worker_ca_key=" + CaKeyFile(credentials_dir()));
    argv.push_back("--bootstrap_token_file=" + BootstrapTokenFile(credentials_dir()));
  }
  for (std::string& flag : MetricsFlags(ServerName(0))) argv.push_back(std::move(flag));
  if (options_.dashboard) {
    fs::remove(DashboardPortFile());
    argv.push_back(absl::StrCat("--dashboard_listen=127.0.0.1:", dashboard_port_));
    argv.push_back("--dashboard_port_file=" + DashboardPortFile());
  }
  argv.insert(argv.end(), options_.coordinator_flags.begin(), options_.coordinator_flags.end());
  return SpawnServer(argv, options_.dir + "/logs/coordinator.log");
}

absl::Status ClusterProcesses::StartCoordinator(int port) {
  auto pid = SpawnCoordinator(port);
  if (!pid.ok()) return pid.status();
  coordinator_ = *pid;
  const std::string port_file = (fs::path(options_.dir) / "coordinator.port").string();
  std::string bound;
  const absl::Time end = absl::Now() + absl::Seconds(20);
  while ((bound = ReadPortFile(port_file, absl::ZeroDuration())).empty() && absl::Now() < end &&
         Running(coordinator_)) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  if (bound.empty()) {
    const std::string log = options_.dir + "/logs/coordinator.log";
    // Its last line says why (a port in use, a bad flag); one that did not exit is killed.
    std::ifstream in(log);
    std::string line, last;
    while (std::getline(in, line)) {
      if (!line.empty()) last = line;
    }
    if (Running(coordinator_)) StopProcesses({coordinator_}, absl::ZeroDuration());
    coordinator_ = -1;
    return absl::UnavailableError(
        absl::StrCat("the coordinator did not start (", last, "); see ", log));
  }
  address_ = "127.0.0.1:" + bound;
  // Written before the job API's port (main.cc): there by now when the dashboard is on.
  if (options_.dashboard) {
    const std::string dashboard = ReadPortFile(DashboardPortFile(), absl::ZeroDuration());
    if (dashboard.empty() || !absl::SimpleAtoi(dashboard, &dashboard_port_)) {
      return absl::InternalError(
          absl::StrCat("the coordinator wrote no dashboard port in ", DashboardPortFile()));
    }
  }
  return absl::OkStatus();
}

std::string ClusterProcesses::ServerName(int i) const {
  return i == 0 ? "coordinator" : absl::StrCat("worker-", i - 1);
}

std::optional<int> ClusterProcesses::Reap(int i) {
  pid_t& pid = ServerPid(i);
  int status;
  if (pid <= 0 || waitpid(pid, &status, WNOHANG) != pid) return std::nullopt;
  pid = -1;  // reaped: the number may belong to another process from now on
  return status;
}

absl::Status ClusterProcesses::Respawn(int i) {
  // The coordinator keeps its address: workers and clients reconnect to it there.
  absl::StatusOr<pid_t> pid =
      i == 0 ? SpawnCoordinator(std::stoi(address_.substr(address_.rfind(':') + 1)))
             : SpawnWorker(i - 1);
  if (!pid.ok()) return pid.status();
  ServerPid(i) = *pid;
  return absl::OkStatus();
}

absl::StatusOr<pid_t> ClusterProcesses::SpawnWorker(int index) {
  std::vector<std::string> argv = {options_.worker_binary,
                                   "--coordinator=" + address_,
                                   "--listen=127.0.0.1:0",
                                   "--advertise_host=127.0.0.1",
                                   absl::StrCat("--threads=", options_.threads_per_worker),
                                   absl::StrCat("--name=worker-", index)};
  // Each worker its own certificate (identity worker-INDEX), issued when first started.
  const std::string name = absl::StrCat("worker-", index);
  if (!options_.insecure) {
    if (absl::Status st = MakeCredentials({credentials_dir(), {}, options_.users, {name}});
        !st.ok()) {
      return st;
    }
  }
  for (std::string& flag : SecurityFlags(WorkerTls(credentials_dir(), name))) {
    argv.push_back(std::move(flag));
  }
  for (std::string& flag : MetricsFlags(ServerName(1 + index))) argv.push_back(std::move(flag));
  argv.insert(argv.end(), options_.worker_flags.begin(), options_.worker_flags.end());
  return SpawnServer(argv, absl::StrCat(options_.dir, "/logs/worker-", index, ".log"));
}

absl::StatusOr<std::string> ClusterProcesses::WorkerId(const std::string& name) {
  auto stub = v1::JobService::NewStub(Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::ListWorkersResponse resp;
  absl::Status st = FromGrpcStatus(stub->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp));
  if (!st.ok()) return st;
  for (const auto& w : resp.workers()) {
    if (w.name() == name) return w.id();
  }
  return absl::NotFoundError(absl::StrCat("no worker named ", name, " is registered"));
}

absl::StatusOr<std::string> ClusterProcesses::AddWorker() {
  const int index = static_cast<int>(workers_.size());
  auto pid = SpawnWorker(index);
  if (!pid.ok()) return pid.status();
  workers_.push_back(*pid);
  const absl::Time end = absl::Now() + kStartTimeout;
  while (absl::Now() < end) {
    auto id = WorkerId(absl::StrCat("worker-", index));
    if (id.ok()) return id;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::UnavailableError(
      absl::StrCat("worker-", index, " did not register; see ", options_.dir, "/logs"));
}

absl::Status ClusterProcesses::RestartCoordinator() {
  StopProcesses({coordinator_}, absl::ZeroDuration());
  return StartCoordinator(std::stoi(address_.substr(address_.rfind(':') + 1)));
}

absl::StatusOr<absl::Duration> ClusterProcesses::DrainAndRestartCoordinator(absl::Duration limit) {
  const pid_t pid = coordinator_;
  const absl::Time start = absl::Now();
  kill(pid, SIGTERM);
  int status = 0;
  const bool exited = AwaitExit(pid, limit) && waitpid(pid, &status, 0) == pid;
  const absl::Duration took = absl::Now() - start;
  coordinator_ = -1;
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return absl::DeadlineExceededError(absl::StrCat("the coordinator did not exit within ",
                                                    absl::FormatDuration(limit), " of SIGTERM"));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("the coordinator exited with status ", status));
  }
  if (absl::Status st = StartCoordinator(std::stoi(address_.substr(address_.rfind(':') + 1)));
      !st.ok()) {
    return st;
  }
  return took;
}

void ClusterProcesses::SetDataRootFlag(const std::string& flag) {
  for (std::vector<std::string>* flags : {&options_.coordinator_flags, &options_.worker_flags}) {
    std::erase_if(*flags, [](const std::string& f) { return f.starts_with("--data_root="); });
    if (!flag.empty()) flags->push_back(flag);
  }
}

absl::Status ClusterProcesses::RestartAll(absl::Duration limit) {
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i) {
    if (workers_[i] <= 0) continue;
    SignalWorker(i, SIGTERM);
    if (absl::StatusOr<int> exit = WaitForWorkerExit(i, limit); !exit.ok()) {
      KillWorker(i);
      return exit.status();
    }
    if (absl::Status st = Respawn(1 + i); !st.ok()) return st;
  }
  // Last: the new coordinator's registry holds only the workers as they are now.
  if (absl::StatusOr<absl::Duration> st = DrainAndRestartCoordinator(limit); !st.ok()) {
    return st.status();
  }
  const absl::Time end = absl::Now() + limit;
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i) {
    if (workers_[i] <= 0) continue;
    while (!WorkerId(absl::StrCat("worker-", i)).ok()) {
      if (absl::Now() >= end) {
        return absl::UnavailableError(
            absl::StrCat("worker-", i, " did not register again; see ", options_.dir, "/logs"));
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  return absl::OkStatus();
}

void ClusterProcesses::KillWorker(int i) {
  StopProcesses({workers_[i]}, absl::ZeroDuration());
  workers_[i] = -1;
}

void ClusterProcesses::SignalWorker(int i, int signal) {
  if (workers_[i] > 0) kill(workers_[i], signal);
}

absl::StatusOr<int> ClusterProcesses::WaitForWorkerExit(int i, absl::Duration limit) {
  const pid_t pid = workers_[i];
  if (pid <= 0) return absl::FailedPreconditionError(absl::StrCat("worker ", i, " is not running"));
  int status = 0;
  if (!AwaitExit(pid, limit) || waitpid(pid, &status, 0) != pid) {
    return absl::DeadlineExceededError(
        absl::StrCat("worker ", i, " still runs after ", absl::FormatDuration(limit)));
  }
  workers_[i] = -1;
  if (!WIFEXITED(status)) {
    return absl::InternalError(absl::StrCat("worker ", i, " ended by signal ", WTERMSIG(status)));
  }
  return WEXITSTATUS(status);
}

void ClusterProcesses::Stop(absl::Duration grace) {
  std::vector<pid_t> running;
  for (pid_t p : pids()) {
    if (p > 0) running.push_back(p);
  }
  StopProcesses(running, grace);
  coordinator_ = -1;
  workers_.assign(workers_.size(), -1);
}

}  // namespace lockstep
