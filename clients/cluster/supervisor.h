// Supervisor: restarts the servers of a local cluster that exit, with exponential backoff,
// so that one crashed worker or coordinator does not end the cluster. The coordinator
// resumes its jobs from its state directory and the workers register again by themselves,
// so a restart is all recovery needs from here.
//
// Time comes in through Poll(now) and the servers through an interface, so the policy is
// tested without processes or sleeps. Its caller polls when a server exits (SIGCHLD) and
// when a restart is due (NextRestart). Not thread-safe; one thread polls.
#ifndef LOCKSTEP_CLIENTS_CLUSTER_SUPERVISOR_H_
#define LOCKSTEP_CLIENTS_CLUSTER_SUPERVISOR_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace lockstep {

struct BackoffOptions {
  absl::Duration initial = absl::Seconds(1);  // the delay before the first restart
  absl::Duration max = absl::Seconds(30);     // the delay doubles up to this
  // A server that stayed up this long was healthy: its next crash waits `initial` again.
  absl::Duration reset_after = absl::Seconds(60);
};

// The delays between the restarts of one server.
class RestartBackoff {
 public:
  explicit RestartBackoff(BackoffOptions options = {})
      : options_(options), next_(options.initial) {}
  // The delay before restarting a server that ran for `uptime` before it exited.
  absl::Duration NextDelay(absl::Duration uptime);

 private:
  BackoffOptions options_;
  absl::Duration next_;
};

// What the supervisor watches: ClusterProcesses, or a fake in tests. Server i is the same
// role (coordinator, worker-0, ...) across its restarts.
class SupervisedServers {
 public:
  virtual ~SupervisedServers() = default;
  virtual int ServerCount() const = 0;
  virtual std::string ServerName(int i) const = 0;
  // Server i's wait status (as waitpid gives it) if it exited since it was last started,
  // reaping it; nullopt while it runs, and for a server stopped on purpose.
  virtual std::optional<int> Reap(int i) = 0;
  // Starts server i again as it was started before, without waiting for it to serve.
  virtual absl::Status Respawn(int i) = 0;
};

// Whether a server that exits is started again (`lockstep cluster up --restart`): kNever
// leaves it gone, so that a worker killed on purpose really leaves its jobs.
enum class RestartPolicy { kAlways, kNever };

// "exited with status 1", "killed by signal 9 (Killed)".
std::string DescribeWaitStatus(int status);

class Supervisor {
 public:
  // `now`: when the servers were started. `log` gets one line (no newline) per event.
  Supervisor(SupervisedServers* servers, absl::Time now, BackoffOptions options,
             std::function<void(const std::string&)> log,
             RestartPolicy policy = RestartPolicy::kAlways);

  // Schedules the restart of every server that exited since the last call and restarts
  // those whose delay has passed (with kNever: logs each that exited, and leaves it).
  // Returns whether any server's pid changed: one was started again, or reaped for good.
  bool Poll(absl::Time now);
  // When the next scheduled restart is due (nullopt: none is): the latest a caller that
  // waits for servers to exit should Poll again.
  std::optional<absl::Time> NextRestart() const;

 private:
  struct Slot {
    RestartBackoff backoff;
    absl::Time started;
    std::optional<absl::Time> restart_at;  // set while the server is down
  };
  // Schedules slot i's restart after `uptime` of running; `why` starts the log line.
  void Schedule(int i, absl::Time now, absl::Duration uptime, const std::string& why);

  SupervisedServers* const servers_;
  const BackoffOptions options_;
  std::function<void(const std::string&)> log_;
  const RestartPolicy policy_;
  std::vector<Slot> slots_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CLIENTS_CLUSTER_SUPERVISOR_H_
