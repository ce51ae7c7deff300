// Commands on a running local cluster, through its record (cluster_record.h): `cluster
// down` stops it; `cluster add-worker` and `cluster data-root add` ask its supervisor to
// start one more worker (SIGUSR1) or to restart every server with one more data root
// (SIGUSR2), and return once it has.
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/cli/args.h"
#include "clients/cli/cluster_record.h"
#include "clients/cli/commands.h"
#include "clients/cluster/cluster_processes.h"

namespace lockstep::cli {
namespace {

namespace fs = std::filesystem;

bool IsClusterServer(pid_t pid) { return Runs(pid, {"lockstep-coordinator", "lockstep-worker"}); }

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
  // A worker has 60 s to register (ClusterProcesses::AddWorker); the record follows.
  const absl::StatusOr<nlohmann::json> after =
      AskSupervisor(dir, SIGUSR1, "added", absl::Seconds(90));
  if (!after.ok()) return Fail(after.status());
  const std::string last = after->value("last_added", "");
  if (last.find(" registered as ") == std::string::npos) {
    return Fail(absl::UnavailableError(absl::StrCat("cluster add-worker: ", last)));
  }
  absl::PrintF("cluster add-worker: %s (logs in %s/logs)\n", last, dir);
  return 0;
}

// `cluster data-root add FOLDER`: the folder in kDataRootRequests, then SIGUSR2 to the
// supervisor, which restarts every server with it (AddDataRoots); returns once it has.
int AddDataRoot(const std::string& dir, const std::string& folder) {
  const std::string root = AbsoluteFolder(folder);
  absl::StatusOr<nlohmann::json> before = ReadRecord(dir);
  if (!before.ok()) return Fail(before.status());
  const std::vector<std::string> roots = before->value("data_roots", std::vector<std::string>{});
  if (std::find(roots.begin(), roots.end(), root) != roots.end()) {
    absl::PrintF("cluster data-root add: %s is a data root already\n", root);
    return 0;
  }
  std::ofstream(fs::path(dir) / kDataRootRequests, std::ios::app) << root << "\n";
  // Each worker leaves at its job's next step boundary; then the coordinator drains.
  const absl::StatusOr<nlohmann::json> after =
      AskSupervisor(dir, SIGUSR2, "data_root_changes", absl::Seconds(300));
  if (!after.ok()) return Fail(after.status());
  const std::string failed = after->value("last_data_root_change", "");
  if (!failed.empty()) return Fail(absl::UnavailableError("cluster data-root add: " + failed));
  absl::PrintF(
      "cluster data-root add: %s: every server restarted with it (running jobs go on from "
      "where they were); data roots now %s\n",
      root, absl::StrJoin(after->value("data_roots", std::vector<std::string>{}), ", "));
  return 0;
}

}  // namespace

void AddRunningClusterCommands(CLI::App& cluster, Commands& out) {
  auto down_dir = std::make_shared<std::string>();
  CLI::App* down_cmd = cluster.add_subcommand("down", "stop a detached local cluster");
  down_cmd->add_option("--dir", *down_dir, kClusterDirHelp)
      ->envname("LOCKSTEP_CLUSTER_DIR")
      ->default_val(".lockstep-cluster");
  out.push_back({down_cmd, [down_dir] { return Down(*down_dir); }});
  auto add_dir = std::make_shared<std::string>();
  CLI::App* add_cmd = cluster.add_subcommand(
      "add-worker", "start one more worker in a running local cluster (returns once registered)");
  add_cmd->add_option("--dir", *add_dir, kClusterDirHelp)
      ->envname("LOCKSTEP_CLUSTER_DIR")
      ->default_val(".lockstep-cluster");
  out.push_back({add_cmd, [add_dir] { return AddWorker(*add_dir); }});
  CLI::App* data_root = cluster.add_subcommand(
      "data-root", "the folders a running local cluster's jobs may read datasets from");
  struct DataRootOptions {
    std::string dir, folder;
  };
  auto root = std::make_shared<DataRootOptions>();
  CLI::App* root_add = data_root->add_subcommand(
      "add",
      "let the jobs of a running local cluster read datasets in FOLDER too: every server "
      "restarts with it (running jobs go on from where they were, bit for bit)");
  root_add->add_option("FOLDER", root->folder, "the folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  root_add->add_option("--dir", root->dir, kClusterDirHelp)
      ->envname("LOCKSTEP_CLUSTER_DIR")
      ->default_val(".lockstep-cluster");
  out.push_back({root_add, [root] { return AddDataRoot(root->dir, root->folder); }});
}

}  // namespace lockstep::cli
