// What a local cluster's processes share through its folder (`lockstep cluster up --dir`):
// the record cluster.json that its supervisor writes (the coordinator's address, the
// servers' and the supervisor's pids, what it did on request), and how commands run
// elsewhere ask that supervisor for something (cluster_command.cc is the supervisor's
// side, cluster_running_commands.cc the asking commands').
#ifndef LOCKSTEP_CLIENTS_CLI_CLUSTER_RECORD_H_
#define LOCKSTEP_CLIENTS_CLI_CLUSTER_RECORD_H_

#include <sys/types.h>

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep::cli {

// How long the servers get to stop after SIGTERM, before SIGKILL.
inline constexpr absl::Duration kStopGrace = absl::Seconds(10);

// The file `cluster data-root add` writes its folders to (one a line) before it sends
// SIGUSR2; the supervisor takes them, then removes it.
inline constexpr char kDataRootRequests[] = "data-roots.add";

// The help of every cluster command's --dir.
inline constexpr char kClusterDirHelp[] = "the cluster's folder: record, credentials, logs, state";

// Whether `pid` runs one of the programs `names` (a zombie runs none): a recorded pid may
// have been reused by an unrelated process since.
bool Runs(pid_t pid, std::initializer_list<std::string_view> names);

// A folder as the servers are given it: absolute (the servers' folder is not the caller's).
std::string AbsoluteFolder(const std::string& dir);

// The cluster's record (cluster.json in `dir`), as the supervisor last wrote it. NOT_FOUND
// when there is none, DATA_LOSS when it does not parse.
absl::StatusOr<nlohmann::json> ReadRecord(const std::string& dir);

// Sends `signal` to the supervisor of the cluster in `dir` and returns its record once
// the supervisor counted the request in `counter` (a field of the record), within
// `limit`. FAILED_PRECONDITION when no supervisor runs, or one from before `counter`
// (which the signal would end); DEADLINE_EXCEEDED naming its log after `limit`.
absl::StatusOr<nlohmann::json> AskSupervisor(const std::string& dir, int signal,
                                             const std::string& counter, absl::Duration limit);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_CLUSTER_RECORD_H_
