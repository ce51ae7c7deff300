// `lockstep cluster up`: a local cluster of one coordinator and N CPU workers as processes
// on loopback, with free ports, logs in a folder, and its supervisor: it restarts a
// server that exits, with backoff (unless `--restart never`) — `cluster up` itself in the
// foreground, a background process of its own with --detach — starts one more worker on
// SIGUSR1 (`lockstep cluster add-worker`), restarts every server with more data roots on
// SIGUSR2 (`cluster data-root add`), and stops the cluster on Ctrl-C or SIGTERM (`cluster
// down`). It keeps the cluster's record (cluster_record.h) up to date.
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
#include "clients/cli/cluster_record.h"
#include "clients/cli/commands.h"
#include "clients/cli/openmp_env.h"
#include "clients/cluster/cluster_processes.h"
#include "clients/cluster/supervisor.h"
#include "core/data/data_roots.h"
#include "services/common/rpc/listen_socket.h"
#include "services/common/security/private_files.h"

namespace lockstep::cli {
namespace {

namespace fs = std::filesystem;

// How often a supervisor with nothing to do reads the servers' metrics port files again.
constexpr absl::Duration kRefresh = absl::Seconds(1);

// What the supervisor did on request: workers started (SIGUSR1, `cluster add-worker`),
// how many and how the last start went ("worker-4 registered as w0004", or why not); and
// the data roots (`cluster up --data-root`, and SIGUSR2, `cluster data-root add`), how
// many times they changed and how the last change went ("" when it went well).
struct Requests {
  int added = 0;
  std::string last_added;
  std::vector<std::string> data_roots;
  int data_root_changes = 0;
  std::string last_data_root_change;
};

// Writes <dir>/cluster.json, what `cluster down` and `cluster add-worker` read: the
// coordinator's address, the servers' pids (-1 for one gone) and the supervisor's, where
// each serves its Prometheus metrics ("metrics": {"coordinator": host:port, "workers":
// [host:port, ...]}; "" for a server not listening), the dashboard's URL ("dashboard"),
// and what it did on request (Requests: "added", "last_added", "data_roots",
// "data_root_changes", "last_data_root_change"). Replaced whole, as restarts rewrite it
// while `cluster down` may be reading it.
void WriteRecord(const std::string& dir, const std::string& address,
                 const ClusterProcesses& cluster, const std::vector<std::string>& metrics,
                 const Requests& requests) {
  nlohmann::json record = {{"coordinator", address},
                           {"pids", cluster.pids()},
                           {"workers", cluster.ServerCount() - 1},
                           {"supervisor", getpid()},
                           {"dashboard", cluster.DashboardUrl()},
                           {"added", requests.added},
                           {"last_added", requests.last_added},
                           {"data_roots", requests.data_roots},
                           {"data_root_changes", requests.data_root_changes},
                           {"last_data_root_change", requests.last_data_root_change}};
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

// The servers' --data_root: what they read anyway ($LOCKSTEP_DATA_ROOT, else the default)
// and `extra` (absolute). Empty without `extra`.
std::string DataRootFlag(const std::vector<std::string>& extra) {
  if (extra.empty()) return "";
  const char* env = std::getenv("LOCKSTEP_DATA_ROOT");
  std::vector<std::string> roots = {env != nullptr && *env != '\0' ? env : kDefaultDataRoots};
  roots.insert(roots.end(), extra.begin(), extra.end());
  return "--data_root=" + absl::StrJoin(roots, ",");
}

// SIGUSR2: the folders kDataRootRequests names join `requests`' data roots, and every
// server starts again with them (ClusterProcesses::RestartAll: running jobs go on).
void AddDataRoots(const std::string& dir, ClusterProcesses& cluster, Requests& requests) {
  const fs::path file = fs::path(dir) / kDataRootRequests;
  std::ifstream in(file);
  std::vector<std::string> roots = requests.data_roots;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && std::find(roots.begin(), roots.end(), line) == roots.end()) {
      roots.push_back(line);
    }
  }
  in.close();
  fs::remove(file);
  if (roots != requests.data_roots) {
    cluster.SetDataRootFlag(DataRootFlag(roots));
    const absl::Status st = cluster.RestartAll(absl::Seconds(90));
    requests.last_data_root_change = st.ok() ? "" : st.ToString();
    if (st.ok()) requests.data_roots = roots;
  }
  ++requests.data_root_changes;
}

// Starts the cluster and supervises it until one of the signals `stop` (blocked in this
// thread) arrives, then stops it; on SIGUSR1 (blocked too) starts one more worker, on
// SIGUSR2 adds data roots (AddDataRoots). `data_roots`: those of `cluster up
// --data-root`. `started` hears once how the start went.
int Supervise(const ClusterOptions& options, RestartPolicy policy, const sigset_t& stop,
              const std::vector<std::string>& data_roots,
              const std::function<void(const absl::Status&, const Started&)>& started) {
  auto cluster = ClusterProcesses::Start(options);
  if (!cluster.ok()) {
    started(cluster.status(), {});
    return 1;
  }
  const std::string address = (*cluster)->address();
  std::vector<std::string> metrics = (*cluster)->MetricsAddresses();
  Requests requests;
  requests.data_roots = data_roots;
  WriteRecord(options.dir, address, **cluster, metrics, requests);
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
  sigaddset(&wake, SIGUSR2);
  sigaddset(&wake, SIGCHLD);
  while (true) {
    absl::Duration wait = kRefresh;
    if (std::optional<absl::Time> due = supervisor.NextRestart(); due.has_value()) {
      wait = std::clamp(*due - absl::Now(), absl::ZeroDuration(), kRefresh);
    }
    const timespec tick = absl::ToTimespec(wait);
    const int sig = sigtimedwait(&wake, nullptr, &tick);
    if (sig > 0 && sig != SIGUSR1 && sig != SIGUSR2 && sig != SIGCHLD) break;  // one of `stop`
    bool changed = supervisor.Poll(absl::Now());
    if (sig == SIGUSR1) {  // returns once the worker has registered, or failed to
      const int index = (*cluster)->ServerCount() - 1;
      absl::StatusOr<std::string> id = (*cluster)->AddWorker();
      requests.last_added = id.ok() ? absl::StrCat("worker-", index, " registered as ", *id)
                                    : absl::StrCat("worker-", index, ": ", id.status().ToString());
      ++requests.added;
      log(absl::StrCat("added ", requests.last_added));
      changed = true;
    }
    if (sig == SIGUSR2) {  // returns once every server runs with them, or failed to
      AddDataRoots(options.dir, **cluster, requests);
      log(absl::StrCat("data roots ", absl::StrJoin(requests.data_roots, ", "),
                       requests.last_data_root_change.empty()
                           ? ": every server restarted with them"
                           : ": " + requests.last_data_root_change));
      changed = true;
    }
    // A restarted server serves its metrics on a new port once it is up.
    std::vector<std::string> now = (*cluster)->MetricsAddresses();
    if (changed || now != metrics) {
      metrics = std::move(now);
      WriteRecord(options.dir, address, **cluster, metrics, requests);
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

// The supervisor's signals, received by sigtimedwait: `stop`, SIGUSR1 (add a worker),
// SIGUSR2 (add data roots) and SIGCHLD (a server exited). Blocked before any thread starts,
// so that none of them dies of SIGUSR1 or SIGUSR2.
void BlockSupervisorSignals(const sigset_t& stop) {
  sigset_t blocked = stop;
  sigaddset(&blocked, SIGUSR1);
  sigaddset(&blocked, SIGUSR2);
  sigaddset(&blocked, SIGCHLD);  // a server's exit, taken by sigtimedwait
  pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
}

// --detach: the supervisor runs in a process of its own, in a new session so that it
// outlives this terminal, with its output in <dir>/logs/supervisor.log. It reports the
// start through a pipe, and this process exits once it has.
int StartDetached(const ClusterOptions& options, RestartPolicy policy, const sigset_t& stop,
                  const std::vector<std::string>& data_roots) {
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
    const int rc =
        Supervise(options, policy, stop, data_roots, [&](const absl::Status& st, const Started& s) {
          // "ok ADDRESS METRICS,METRICS,... DASHBOARD": the metrics list and the dashboard's
          // URL are empty or have no spaces.
          const std::string message =
              st.ok() ? absl::StrCat("ok ", s.address, " ", absl::StrJoin(s.metrics, ","), " ",
                                     s.dashboard)
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
  // The folder names the cluster (its address, credentials and supervisor) from anywhere:
  // job commands and `cluster down` run in another folder find it through the variable.
  const std::string dir = AbsoluteFolder(options.dir);
  absl::PrintF(
      "export LOCKSTEP_CLUSTER_DIR=%s%s   # then, from any folder: lockstep list; "
      "stop with: lockstep cluster down\n",
      dir, options.insecure ? " LOCKSTEP_INSECURE=1" : "");
  if (options.dir != ".lockstep-cluster") {
    absl::PrintF(
        "cluster up: without the variable: lockstep list --dir %s; lockstep cluster down "
        "--dir %s\n",
        dir, dir);
  }
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
  std::vector<std::string> data_roots;  // besides the servers' own (--data-root)
};

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
  std::vector<std::string> data_roots;
  for (const std::string& d : o.data_roots) data_roots.push_back(AbsoluteFolder(d));
  if (const std::string roots = DataRootFlag(data_roots); !roots.empty()) {
    options.coordinator_flags.push_back(roots);  // checks dataset paths at submit
    options.worker_flags.push_back(roots);       // reads them
  }
  const RestartPolicy policy =
      o.restart == "never" ? RestartPolicy::kNever : RestartPolicy::kAlways;
  if (o.detach) return StartDetached(options, policy, stop, data_roots);
  // Blocked before anything starts, so that the supervision loop receives Ctrl-C.
  BlockSupervisorSignals(stop);
  bool up = false;
  const int rc = Supervise(options, policy, stop, data_roots,
                           [&](const absl::Status& st, const Started& started) {
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

}  // namespace

void AddClusterCommands(CLI::App& app, Commands& out) {
  CLI::App* cluster = app.add_subcommand(
      "cluster",
      "a local cluster: `cluster up`, `cluster down`, `cluster add-worker`, `cluster data-root "
      "add`");

  auto up = std::make_shared<UpOptions>();
  CLI::App* up_cmd = cluster->add_subcommand(
      "up", "start a local cluster (coordinator + N CPU workers on loopback); Ctrl-C stops it");
  up_cmd->add_option("--workers", up->workers, "CPU workers")->check(AtLeast(1));
  up_cmd->add_option("--threads", up->threads, "threads per worker (0: the cores shared out)")
      ->check(AtLeast(0));
  up_cmd->add_option("--dir", up->dir, kClusterDirHelp)
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
      ->add_option("--data-root", up->data_roots,
                   absl::StrCat("a folder whose datasets jobs may read (dataset paths must lie "
                                "in one), besides ",
                                kDefaultDataRoots, " or $LOCKSTEP_DATA_ROOT; repeatable"))
      ->type_name("DIR")
      ->check(CLI::ExistingDirectory);
  out.push_back({up_cmd, [up] { return Up(*up); }});
  AddRunningClusterCommands(*cluster, out);
}

}  // namespace lockstep::cli
