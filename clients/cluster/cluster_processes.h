// ClusterProcesses: a local cluster's servers as processes on loopback — a coordinator
// and N workers with free ports, each one's output in a log file — started, grown,
// killed, restarted (by a Supervisor) and stopped. `lockstep cluster up` and the
// integration tests share it. The servers are this process's children and die with it,
// even by SIGKILL: a detached `cluster up` keeps them in a supervisor process of its own.
//
// Not thread-safe; one thread manages a cluster.
#ifndef LOCKSTEP_CLIENTS_CLUSTER_CLUSTER_PROCESSES_H_
#define LOCKSTEP_CLIENTS_CLUSTER_CLUSTER_PROCESSES_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "clients/cluster/supervisor.h"
#include "services/common/rpc/net.h"

namespace lockstep {

struct ClusterOptions {
  std::string dir;  // logs go to dir/logs, the coordinator's state to dir/state
  std::string coordinator_binary, worker_binary;
  int port = 0;  // the coordinator's; 0 picks a free one
  int workers = 0;
  int threads_per_worker = 1;
  std::vector<std::string> coordinator_flags;  // more flags for the coordinator
  std::vector<std::string> worker_flags;       // more flags for every worker (--data_root)
  // Plaintext (--insecure) instead of TLS with the credentials made in dir/credentials
  // (credentials.h; users: callers with role user besides admin).
  bool insecure = false;
  std::vector<std::string> users;
  // Every server serves Prometheus metrics on 127.0.0.1 at a free port (MetricsAddresses).
  bool metrics = false;
  // The coordinator serves its web dashboard on 127.0.0.1 at a free port, the same one
  // again after a restart (DashboardUrl).
  bool dashboard = false;
};

// As SupervisedServers, server 0 is the coordinator and server 1 + i is worker i.
class ClusterProcesses : public SupervisedServers {
 public:
  // Starts the coordinator, then the workers one by one, each registered before the next
  // starts (so worker ids follow start order). UNAVAILABLE naming the logs to read when a
  // server does not come up.
  static absl::StatusOr<std::unique_ptr<ClusterProcesses>> Start(const ClusterOptions& options);
  // Stops every server still running (SIGKILL).
  ~ClusterProcesses() override;

  const std::string& address() const { return address_; }  // the coordinator's host:port
  // Where the CA, certificates and tokens are (empty when insecure).
  std::string credentials_dir() const;
  // A channel to the coordinator as `user` (with its token; anyone in plaintext).
  std::shared_ptr<grpc::Channel> Channel(const std::string& user = "admin") const;
  // The coordinator first, then the workers in start order (-1 for one killed).
  std::vector<pid_t> pids() const;
  // With options.metrics, where each server serves its metrics (host:port, GET /metrics),
  // in pids()'s order: "" for one killed or not listening yet. Empty without.
  std::vector<std::string> MetricsAddresses() const;
  // With options.dashboard, the dashboard's URL ("https://127.0.0.1:PORT/", http:// when
  // insecure); empty without, or before the coordinator bound it.
  std::string DashboardUrl() const;

  // Starts one more worker and waits until it registers; returns its worker id.
  absl::StatusOr<std::string> AddWorker();
  // SIGKILLs the coordinator and starts it again on the same port and state directory.
  absl::Status RestartCoordinator();
  // SIGTERMs the coordinator (a drain), waits at most `limit` for it to exit, and starts it
  // again on the same port and state directory. The time from the signal to its exit;
  // DEADLINE_EXCEEDED (it is SIGKILLed then) past `limit`, INTERNAL when its exit status
  // was not 0.
  absl::StatusOr<absl::Duration> DrainAndRestartCoordinator(absl::Duration limit);
  // Replaces the servers' --data_root flag (`flag`: "--data_root=A,B", or "" for none)
  // for the servers started from now on (RestartAll).
  void SetDataRootFlag(const std::string& flag);
  // Restarts every running server with the flags as they are now: each worker leaves
  // (SIGTERM: at its job's next step boundary, nothing lost) and starts again, then the
  // coordinator drains and starts again on its port and state directory; returns once
  // every worker has registered again. Running jobs continue bit for bit. UNAVAILABLE or
  // DEADLINE_EXCEEDED naming the server that did not come back within `limit`.
  absl::Status RestartAll(absl::Duration limit);
  // SIGKILLs worker i (in start order).
  void KillWorker(int i);
  // Sends `signal` to worker i (SIGSTOP, SIGCONT: a stall; SIGTERM: it leaves).
  void SignalWorker(int i, int signal);
  // Waits at most `limit` for worker i to exit, and reaps it: its exit status (WEXITSTATUS;
  // INTERNAL when a signal killed it). DEADLINE_EXCEEDED past `limit` (it keeps running);
  // FAILED_PRECONDITION when it is not running (killed, or reaped before).
  absl::StatusOr<int> WaitForWorkerExit(int i, absl::Duration limit);
  // SIGTERM to every server, SIGKILL to those still running after `grace`.
  void Stop(absl::Duration grace);
  // SupervisedServers. Respawn starts the coordinator on its port and state directory, a
  // worker under its name (it registers again by itself); neither waits for the server.
  int ServerCount() const override { return 1 + static_cast<int>(workers_.size()); }
  std::string ServerName(int i) const override;
  std::optional<int> Reap(int i) override;
  absl::Status Respawn(int i) override;

 private:
  explicit ClusterProcesses(ClusterOptions options) : options_(std::move(options)) {}
  absl::Status StartCoordinator(int port);
  absl::StatusOr<pid_t> SpawnCoordinator(int port);
  pid_t& ServerPid(int i) { return i == 0 ? coordinator_ : workers_[i - 1]; }
  absl::StatusOr<pid_t> SpawnWorker(int index);
  // The flags giving a server its certificate (or --insecure).
  std::vector<std::string> SecurityFlags(const TlsFiles& files) const;
  // The flags serving server `name`'s metrics (none without options.metrics), its port
  // file removed.
  std::vector<std::string> MetricsFlags(const std::string& name) const;
  std::string MetricsPortFile(const std::string& name) const;
  std::string DashboardPortFile() const;
  // The id of the registered worker called `name`.
  absl::StatusOr<std::string> WorkerId(const std::string& name);

  ClusterOptions options_;  // its flags change only by SetDataRootFlag
  std::string address_;
  pid_t coordinator_ = -1;
  int dashboard_port_ = 0;  // once bound: the one a restarted coordinator binds again
  std::vector<pid_t> workers_;
};

// Starts argv[0] with stdin from /dev/null and stdout and stderr appended to `log`, in a
// process group of its own, killed when this process dies. The child starts with default
// signal handling and no blocked signals.
absl::StatusOr<pid_t> SpawnServer(const std::vector<std::string>& argv, const std::string& log);
// Whether `pid` runs (reaping it if it is our child and has exited; a zombie does not).
bool Running(pid_t pid);
// Waits until process `pid` (ours or not) has exited, or `timeout` passed: whether it
// has. Woken by the exit itself (a pidfd), never by polling; reaps nothing.
bool AwaitExit(pid_t pid, absl::Duration timeout);
// SIGTERM, then SIGKILL to those still running after `grace`.
void StopProcesses(const std::vector<pid_t>& pids, absl::Duration grace);

}  // namespace lockstep

#endif  // LOCKSTEP_CLIENTS_CLUSTER_CLUSTER_PROCESSES_H_
