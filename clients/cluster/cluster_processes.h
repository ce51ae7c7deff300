// ClusterProcesses: a local cluster's servers as processes on loopback — a coordinator
// and N workers with free ports, each one's output in a log file — started, grown,
// killed and stopped. `lockstep cluster up` and the integration tests share it.
//
// Not thread-safe; one thread manages a cluster.
#ifndef LOCKSTEP_CLIENTS_CLUSTER_CLUSTER_PROCESSES_H_
#define LOCKSTEP_CLIENTS_CLUSTER_CLUSTER_PROCESSES_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep {

struct ClusterOptions {
  std::string dir;  // logs go to dir/logs, the coordinator's state to dir/state
  std::string coordinator_binary, worker_binary;
  int port = 0;  // the coordinator's; 0 picks a free one
  int workers = 0;
  int threads_per_worker = 1;
  std::vector<std::string> coordinator_flags;  // more flags for the coordinator
  // Detached: the servers run in a session of their own and outlive this process.
  // Otherwise they are killed when this process dies, even by SIGKILL.
  bool detach = false;
};

class ClusterProcesses {
 public:
  // Starts the coordinator, then the workers one by one, each registered before the next
  // starts (so worker ids follow start order). UNAVAILABLE naming the logs to read when a
  // server does not come up.
  static absl::StatusOr<std::unique_ptr<ClusterProcesses>> Start(const ClusterOptions& options);
  // Stops every server still running (SIGKILL), unless Detach() was called.
  ~ClusterProcesses();

  const std::string& address() const { return address_; }  // the coordinator's host:port
  // The coordinator first, then the workers in start order (-1 for one killed).
  std::vector<pid_t> pids() const;

  // Starts one more worker and waits until it registers; returns its worker id.
  absl::StatusOr<std::string> AddWorker();
  // SIGKILLs the coordinator and starts it again on the same port and state directory.
  absl::Status RestartCoordinator();
  // SIGKILLs worker i (in start order).
  void KillWorker(int i);
  // Sends `signal` to worker i (SIGSTOP, SIGCONT: a stall).
  void SignalWorker(int i, int signal);
  // Whether every server started is still running.
  bool AllRunning();
  // SIGTERM to every server, SIGKILL to those still running after `grace`.
  void Stop(absl::Duration grace);
  // Leaves the servers running when this object goes.
  void Detach() { detached_ = true; }

 private:
  explicit ClusterProcesses(ClusterOptions options) : options_(std::move(options)) {}
  absl::Status StartCoordinator(int port);
  absl::StatusOr<pid_t> SpawnWorker(int index);
  // The id of the registered worker called `name`.
  absl::StatusOr<std::string> WorkerId(const std::string& name);

  const ClusterOptions options_;
  std::string address_;
  pid_t coordinator_ = -1;
  std::vector<pid_t> workers_;
  bool detached_ = false;
};

// Starts argv[0] with stdin from /dev/null and stdout and stderr appended to `log`; in a
// session of its own when `detach`, else killed when this process dies. The child starts
// with default signal handling and no blocked signals.
absl::StatusOr<pid_t> SpawnServer(const std::vector<std::string>& argv, const std::string& log,
                                  bool detach);
// Whether `pid` runs (reaping it if it is our child and has exited).
bool Running(pid_t pid);
// SIGTERM, then SIGKILL to those still running after `grace`.
void StopProcesses(const std::vector<pid_t>& pids, absl::Duration grace);

}  // namespace lockstep

#endif  // LOCKSTEP_CLIENTS_CLUSTER_CLUSTER_PROCESSES_H_
