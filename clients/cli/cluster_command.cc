// `lockstep cluster up|down|add-worker`: a local cluster of one coordinator and N CPU
// workers as processes on loopback, with free ports, logs in a folder. A supervisor
// restarts a server that exits, with backoff (unless `--restart never`) — `cluster up`
// itself in the foreground, a background process of its own with --detach — starts one
// more worker on SIGUSR1, which is what `lockstep cluster add-worker` sends it, and stops
// the cluster on Ctrl-C or SIGTERM, which is what `lockstep cluster down` sends it.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"
#include "clients/cli/openmp_env.h"
#include "clients/cluster/cluster_processes.h"
#include "clients/cluster/supervisor.h"
#include "core/data/data_roots.h"
#include "services/common/listen_socket.h"
#include "services/common/private_files.h"

namespace lockstep::cli {
namespace {

namespace fs = std::filesystem;

// How long the servers get to stop after SIGTERM, before SIGKILL.
constexpr absl::Duration kStopGrace = absl::Seconds(10);
// How often a supervisor with nothing to do reads the servers' metrics port files again.
constexpr absl::Duration kRefresh = absl::Seconds(1);

// Whether `pid` runs one of the programs `names` (a zombie runs none): a recorded pid may
// have been reused by an unrelated process since.
bool Runs(pid_t pid, std::initializer_list<std::string_view> names) {
  if (pid <= 0) return false;
  std::error_code ec;
  std::string exe = fs::read_symlink(absl::StrCat("/proc/", pid, "/exe"), ec).filename();
  if (ec) return false;
  // A binary rebuilt since the process started reads "NAME (deleted)".
  if (exe.ends_with(" (deleted)")) exe.resize(exe.size() - std::string_view(" (deleted)").size());
  for (std::string_view name : names) {
    if (exe == name) return true;
  }
  return false;
}

bool IsClusterServer(pid_t pid) { return Runs(pid, {"lockstep-coordinator", "lockstep-worker"}); }

// Workers started on request (SIGUSR1, `cluster add-worker`): how many, and how the last
// start went ("worker-4 registered as w0004", or why not).
struct Added {
  int count = 0;
  std::string last;
};

// Writes <dir>/cluster.json, what `cluster down` and `cluster add-worker` read: the
// coordinator's address, the servers' pids (-1 for one gone) and the supervisor's, where
// each serves its Prometheus metrics ("metrics": {"coordinator": host:port, "workers":
// [host:port, ...]}; "" for a server not listening), the dashboard's URL ("dashboard"),
// and the workers added on request ("added", "last_added"). Replaced whole, as restarts
// rewrite it while `cluster down` may be reading it.
void WriteRecord(const std::string& dir, const std::string& address,
                 const ClusterProcesses& cluster, const std::vector<std::string>& metrics,
                 const Added& added) {
  nlohmann::json record = {{"coordinator", address},
                           {"pids", cluster.pids()},
                           {"workers", cluster.ServerCount() - 1},
                           {"supervisor", getpid()},
                           {"dashboard", cluster.DashboardUrl()},
                           {"added", added.count},
                           {"last_added", added.last}};
  if (!metrics.empty()) {
    record["metrics"] = {{"coordinator", metrics[0]},
                         {"workers", std::vector<std::string>(metrics.begin() + 1, metrics.end())}};
  }
  const fs::path path = fs::path(dir) / "cluster.json";
  const fs::path tmp = fs::path(dir) / "cluster.json.tmp";
  std::ofstream(tmp) << record.dump(2) << "\n";
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) absl::FPrintF(stderr, "cluster up: cannot write %s: %s\n", path.string(), ec.message());
}

// What `cluster up` tells once the cluster is up: the coordinator's address, the metrics
// addresses (ClusterProcesses::MetricsAddresses) and the dashboard's URL.
struct Started {
  std::string address;
  std::vector<std::string> metrics;
  std::string dashboard;
};

// Starts the cluster and supervises it until one of the signals `stop` (blocked in this
// thread) arrives, then stops it; on SIGUSR1 (blocked too) starts one more worker.
// `started` hears once how the start went.
int Supervise(const ClusterOptions& options, RestartPolicy policy, const sigset_t& stop,
              const std::function<void(const absl::Status&, const Started&)>& started) {
  auto cluster = ClusterProcesses::Start(options);
  if (!cluster.ok()) {
    started(cluster.status(), {});
    return 1;
  }
  const std::string address = (*cluster)->address();
  std::vector<std::string> metrics = (*cluster)->MetricsAddresses();
  Added added;
  WriteRecord(options.dir, address, **cluster, metrics, added);
  started(absl::OkStatus(), {address, metrics, (*cluster)->DashboardUrl()});
  const auto log = [&options](const std::string& line) {
    absl::FPrintF(stderr, "cluster up: %s (logs in %s/logs)\n", line, options.dir);
    std::fflush(stderr);
  };
  Supervisor supervisor(cluster->get(), absl::Now(), BackoffOptions{}, log, policy);
  // Woken by a server's exit (SIGCHLD), a restart that is due, or a signal; and every
  // kRefresh for the record's metrics addresses, which a restarted server writes once up.
  sigset_t wake = stop;
  sigaddset(&wake, SIGUSR1);
  sigaddset(&wake, SIGCHLD);
  while (true) {
    absl::Duration wait = kRefresh;
    if (std::optional<absl::Time> due = supervisor.NextRestart(); due.has_value()) {
      wait = std::clamp(*due - absl::Now(), absl::ZeroDuration(), kRefresh);
    }
    const timespec tick = absl::ToTimespec(wait);
    const int sig = sigtimedwait(&wake, nullptr, &tick);
    if (sig > 0 && sig != SIGUSR1 && sig != SIGCHLD) break;  // one of `stop`
    bool changed = supervisor.Poll(absl::Now());
    if (sig == SIGUSR1) {  // returns once the worker has registered, or failed to
      const int index = (*cluster)->ServerCount() - 1;
      absl::StatusOr<std::string> id = (*cluster)->AddWorker();
      added.last = id.ok() ? absl::StrCat("worker-", index, " registered as ", *id)
                           : absl::StrCat("worker-", index, ": ", id.status().ToString());
      ++added.count;
      log(absl::StrCat("added ", added.last));
      changed = true;
    }
    // A restarted server serves its metrics on a new port once it is up.
    std::vector<std::string> now = (*cluster)->MetricsAddresses();
    if (changed || now != metrics) {
      metrics = std::move(now);
      WriteRecord(options.dir, address, **cluster, metrics, added);
    }
  }
  (*cluster)->Stop(kStopGrace);
  fs::remove(fs::path(options.dir) / "cluster.json");
  return 0;
}

void PrintStarted(const ClusterOptions& options, const Started& started) {
  absl::PrintF("cluster up: coordinator %s, %d worker%s (%d threads each), logs in %s/logs\n",
               started.address, options.workers, options.workers == 1 ? "" : "s",
               options.threads_per_worker, options.dir);
  if (!started.metrics.empty()) {
    absl::PrintF(
        "cluster up: Prometheus metrics (GET /metrics, plain HTTP on loopback): coordinator %s, "
        "workers %s\n",
        started.metrics[0], absl::StrJoin(started.metrics.begin() + 1, started.metrics.end(), " "));
  }
  if (!started.dashboard.empty()) {
    absl::PrintF("cluster up: dashboard %s%s\n", started.dashboard,
                 options.insecure ? ""
                                  : absl::StrCat(" (log in with a token from ", options.dir,
                                                 "/credentials/*.token; its certificate is from ",
                                                 options.dir, "/credentials/ca.pem)"));
  }
  if (options.insecure) {
    absl::PrintF("cluster up: PLAINTEXT, no authentication (--insecure), loopback only\n");
  } else {
    absl::PrintF("cluster up: TLS; CA, certificates and the admin token in %s/credentials\n",
                 options.dir);
  }
}

// The supervisor's signals, received by sigtimedwait: `stop`, SIGUSR1 (add a worker) and
// SIGCHLD (a server exited). Blocked before any thread starts, so that none of them dies of
// SIGUSR1.
void BlockSupervisorSignals(const sigset_t& stop) {
  sigset_t blocked = stop;
  sigaddset(&blocked, SIGUSR1);
  sigaddset(&blocked, SIGCHLD);  // a server's exit, taken by sigtimedwait
  pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
}

// --detach: the supervisor runs in a process of its own, in a new session so that it
// outlives this terminal, with its output in <dir>/logs/supervisor.log. It reports the
// start through a pipe, and this process exits once it has.
int StartDetached(const ClusterOptions& options, RestartPolicy policy, const sigset_t& stop) {
  std::error_code ec;
  fs::create_directories(fs::path(options.dir) / "logs", ec);
  if (ec) return Fail(absl::FailedPreconditionError(absl::StrCat(options.dir, ": ", ec.message())));
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Fail(absl::InternalError("pipe failed"));
  std::fflush(nullptr);  // or the child would print this process's buffered output again
  const pid_t pid = fork();
  if (pid < 0) return Fail(absl::InternalError("fork failed"));
  if (pid == 0) {
    close(fds[0]);
    setsid();
    const int in = open("/dev/null", O_RDONLY);
    const std::string log = options.dir + "/logs/supervisor.log";
    const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (in >= 0) dup2(in, 0);
    if (out >= 0) {
      dup2(out, 1);
      dup2(out, 2);
    }
    BlockSupervisorSignals(stop);
    const int rc = Supervise(options, policy, stop, [&](const absl::Status& st, const Started& s) {
      // "ok ADDRESS METRICS,METRICS,... DASHBOARD": the metrics list and the dashboard's
      // URL are empty or have no spaces.
      const std::string message =
          st.ok()
              ? absl::StrCat("ok ", s.address, " ", absl::StrJoin(s.metrics, ","), " ", s.dashboard)
              : st.ToString();
      if (write(fds[1], message.data(), message.size()) < 0) {
        absl::FPrintF(stderr, "cluster up: the launcher is gone\n");
      }
      close(fds[1]);
    });
    std::fflush(nullptr);
    _exit(rc);  // this copy of the launcher has nothing else to do
  }
  close(fds[1]);
  std::string message;
  char buf[512];
  for (ssize_t got; (got = read(fds[0], buf, sizeof(buf))) != 0;) {
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) break;
    message.append(buf, got);
  }
  close(fds[0]);
  if (message.rfind("ok ", 0) != 0) {
    if (message.empty()) message = "the supervisor exited; see " + options.dir + "/logs";
    return Fail(absl::UnavailableError(message));
  }
  Started started;
  const std::vector<std::string> parts = absl::StrSplit(message.substr(3), ' ');
  started.address = parts[0];
  if (parts.size() > 1 && !parts[1].empty()) started.metrics = absl::StrSplit(parts[1], ',');
  if (parts.size() > 2) started.dashboard = parts[2];
  PrintStarted(options, started);
  absl::PrintF(
      "export LOCKSTEP_COORDINATOR=%s%s   # stop with: lockstep cluster down\n", started.address,
      options.insecure ? " LOCKSTEP_INSECURE=1"
                       : absl::StrCat(" LOCKSTEP_CREDENTIALS=", fs::absolute(options.dir).string(),
                                      "/credentials"));
  return 0;
}

struct UpOptions {
  int workers = 2;
  int threads = 0;  // 0: the cores shared among the workers
  std::string dir;
  int port = 0;
  bool detach = false;
  bool insecure = false;
  std::string restart = "always";       // or "never": an exited server stays gone
  std::vector<std::string> data_roots;  // besides the servers' own (--data_root)
};

// The servers' --data_root: what they read anyway ($LOCKSTEP_DATA_ROOT, else the default)
// and `extra`, absolute (the servers' folder is not the caller's). Empty without `extra`.
std::string DataRootFlag(const std::vector<std::string>& extra) {
  if (extra.empty()) return "";
  const char* env = std::getenv("LOCKSTEP_DATA_ROOT");
  std::vector<std::string> roots = {env != nullptr && *env != '\0' ? env : kDefaultDataRoots};
  for (const std::string& d : extra) roots.push_back(fs::absolute(d).lexically_normal().string());
  return "--data_root=" + absl::StrJoin(roots, ",");
}

int Up(const UpOptions& o) {
  SetPrivateUmask();  // the cluster's folder: credentials, state and logs, the owner's only
  const int n = o.workers;
  const std::string& dir = o.dir;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, cores / n));
  auto coord_bin = FindBinary("lockstep-coordinator");
  auto worker_bin = FindBinary("lockstep-worker");
  if (!coord_bin.ok()) return Fail(coord_bin.status());
  if (!worker_bin.ok()) return Fail(worker_bin.status());
  if (fs::exists(fs::path(dir) / "cluster.json")) {
    return Fail(absl::AlreadyExistsError(absl::StrCat(
        "a cluster is recorded in ", dir, "/cluster.json: run `lockstep cluster down` first")));
  }
  // A port another server holds is refused before anything starts (the coordinator would
  // refuse it too, but only once the credentials are made and its log written).
  if (o.port != 0) {
    if (absl::Status st = CheckPortFree("--port", absl::StrCat("127.0.0.1:", o.port)); !st.ok()) {
      return Fail(st);
    }
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  // Several servers share this host's cores: their OpenMP threads sleep while they wait.
  SleepOpenMpWaits();
  ClusterOptions options;
  options.dir = dir;
  options.coordinator_binary = *coord_bin;
  options.worker_binary = *worker_bin;
  options.port = o.port;
  options.workers = n;
  options.threads_per_worker = threads;
  options.insecure = o.insecure;
  options.metrics = true;    // on loopback only, as the cluster
  options.dashboard = true;  // so is the dashboard
  if (const std::string roots = DataRootFlag(o.data_roots); !roots.empty()) {
    options.coordinator_flags.push_back(roots);  // checks dataset paths at submit
    options.worker_flags.push_back(roots);       // reads them
  }
  const RestartPolicy policy =
      o.restart == "never" ? RestartPolicy::kNever : RestartPolicy::kAlways;
  if (o.detach) return StartDetached(options, policy, stop);
  // Blocked before anything starts, so that the supervision loop receives Ctrl-C.
  BlockSupervisorSignals(stop);
  bool up = false;
  const int rc =
      Supervise(options, policy, stop, [&](const absl::Status& st, const Started& started) {
        if (!st.ok()) {
          Fail(st);
          return;
        }
        up = true;
        PrintStarted(options, started);
        absl::PrintF("press Ctrl-C to stop\n");
        std::fflush(stdout);
      });
  if (up) absl::PrintF("cluster stopped\n");
  return rc;
}

// Waits until `pid` no longer runs `name`; false after `timeout`. (Not waitpid: the
// supervisor is not our child; AwaitExit's pidfd wakes on its exit.)
bool WaitGone(pid_t pid, std::string_view name, absl::Duration timeout) {
  return !Runs(pid, {name}) || AwaitExit(pid, timeout);
}

int Down(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "cluster.json");
  if (!in) return Fail(absl::NotFoundError(absl::StrCat("no cluster recorded in ", dir)));
  std::vector<pid_t> recorded, pids;
  pid_t supervisor = 0;  // none in records from before supervision
  try {
    const nlohmann::json record = nlohmann::json::parse(in);
    recorded = record.at("pids").get<std::vector<pid_t>>();
    supervisor = record.value("supervisor", pid_t{0});
  } catch (const std::exception& e) {
    return Fail(absl::DataLossError(absl::StrCat(dir, "/cluster.json: ", e.what())));
  }
  for (pid_t p : recorded) {
    if (IsClusterServer(p)) pids.push_back(p);
  }
  // The supervisor first: it stops the servers in order, and a server stopped behind its
  // back would be restarted. Its servers die with it if it has to be killed.
  if (Runs(supervisor, {"lockstep"})) {
    kill(supervisor, SIGTERM);
    if (!WaitGone(supervisor, "lockstep", kStopGrace + absl::Seconds(5))) {
      kill(supervisor, SIGKILL);
      WaitGone(supervisor, "lockstep", absl::Seconds(5));
    }
  }
  // What is left: the servers of a record without a supervisor, or of a supervisor that
  // died without stopping them.
  std::vector<pid_t> left;
  for (pid_t p : pids) {
    if (IsClusterServer(p)) left.push_back(p);
  }
  StopProcesses(left, kStopGrace);
  fs::remove(fs::path(dir) / "cluster.json");
  absl::PrintF("cluster down: stopped %d servers (%d recorded were no longer running)\n",
               pids.size(), recorded.size() - pids.size());
  return 0;
}

// `cluster add-worker`: SIGUSR1 to the cluster's supervisor, which starts worker-N and
// records how that went; returns once it has (the worker registered, or failed to).
int AddWorker(const std::string& dir) {
  const fs::path path = fs::path(dir) / "cluster.json";
  const auto read = [&path]() -> absl::StatusOr<nlohmann::json> {
    std::ifstream in(path);
    if (!in) return absl::NotFoundError(absl::StrCat("no cluster recorded in ", path.string()));
    try {
      return nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      return absl::DataLossError(absl::StrCat(path.string(), ": ", e.what()));
    }
  };
  absl::StatusOr<nlohmann::json> before = read();
  if (!before.ok()) return Fail(before.status());
  const pid_t supervisor = before->value("supervisor", pid_t{0});
  if (!Runs(supervisor, {"lockstep"})) {
    return Fail(absl::FailedPreconditionError(
        absl::StrCat("the supervisor of the cluster in ", dir, " (pid ", supervisor,
                     ") does not run: `lockstep cluster down`, then `cluster up` again")));
  }
  // A supervisor from before add-worker records no "added", and SIGUSR1 would end it.
  if (!before->contains("added")) {
    return Fail(absl::FailedPreconditionError(
        absl::StrCat("the cluster in ", dir, " was started by a lockstep without add-worker: ",
                     "`lockstep cluster down`, then `cluster up` again")));
  }
  const int count = before->value("added", 0);
  kill(supervisor, SIGUSR1);
  // A worker has 60 s to register (ClusterProcesses::AddWorker); the record follows.
  const absl::Time end = absl::Now() + absl::Seconds(90);
  absl::StatusOr<nlohmann::json> after = before;
  // Rewritten by rename: a read sees the old record or the new one, whole.
  while (absl::Now() < end && (after = read()).ok() && after->value("added", 0) == count) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (!after.ok()) return Fail(after.status());
  if (after->value("added", 0) == count) {
    return Fail(absl::DeadlineExceededError(
        absl::StrCat("the supervisor started no worker within 90 s; see ", dir, "/logs")));
  }
  const std::string last = after->value("last_added", "");
  if (last.find(" registered as ") == std::string::npos) {
    return Fail(absl::UnavailableError(absl::StrCat("cluster add-worker: ", last)));
  }
  absl::PrintF("cluster add-worker: %s (logs in %s/logs)\n", last, dir);
  return 0;
}

}  // namespace

void AddClusterCommands(CLI::App& app, Commands& out) {
  CLI::App* cluster = app.add_subcommand(
      "cluster", "a local cluster: `cluster up`, `cluster down`, `cluster add-worker`");
  const std::string dir_help = "the cluster's folder: record, credentials, logs, state";
  auto up = std::make_shared<UpOptions>();
  CLI::App* up_cmd = cluster->add_subcommand(
      "up", "start a local cluster (coordinator + N CPU workers on loopback); Ctrl-C stops it");
  up_cmd->add_option("--workers", up->workers, "CPU workers")->check(AtLeast(1));
  up_cmd->add_option("--threads", up->threads, "threads per worker (0: the cores shared out)")
      ->check(AtLeast(0));
  up_cmd->add_option("--dir", up->dir, dir_help)
      ->envname("LOCKSTEP_CLUSTER_DIR")
      ->default_val(".lockstep-cluster");
  up_cmd->add_option("--port", up->port, "the coordinator's port (0: a free one)")
      ->check(CLI::Range(0, 65535));
  up_cmd->add_flag("--detach", up->detach, "run in the background; `cluster down` stops it");
  up_cmd->add_flag("--insecure", up->insecure, "plaintext and no tokens (loopback only)");
  up_cmd
      ->add_option("--restart", up->restart,
                   "always: a server that exits is started again (backoff 1 s to 30 s); never: "
                   "it stays gone (a killed worker leaves its jobs for good)")
      ->check(CLI::IsMember({"always", "never"}))
      ->default_val("always");
  up_cmd
      ->add_option("--data_root", up->data_roots,
                   absl::StrCat("a folder whose datasets jobs may read (dataset paths must lie "
                                "in one), besides ",
                                kDefaultDataRoots, " or $LOCKSTEP_DATA_ROOT; repeatable"))
      ->type_name("DIR")
      ->check(CLI::ExistingDirectory);
  out.push_back({up_cmd, [up] { return Up(*up); }});
  auto down_dir = std::make_shared<std::string>();
  CLI::App* down_cmd = cluster->add_subcommand("down", "stop a detached local cluster");
  down_cmd->add_option("--dir", *down_dir, dir_help)
      ->envname("LOCKSTEP_CLUSTER_DIR")
      ->default_val(".lockstep-cluster");
  out.push_back({down_cmd, [down_dir] { return Down(*down_dir); }});
  auto add_dir = std::make_shared<std::string>();
  CLI::App* add_cmd = cluster->add_subcommand(
      "add-worker", "start one more worker in a running local cluster (returns once registered)");
  add_cmd->add_option("--dir", *add_dir, dir_help)
      ->envname("LOCKSTEP_CLUSTER_DIR")
      ->default_val(".lockstep-cluster");
  out.push_back({add_cmd, [add_dir] { return AddWorker(*add_dir); }});
}

}  // namespace lockstep::cli
