// `lockstep cluster up|down`: a local cluster of one coordinator and N CPU workers as
// processes on loopback, with free ports, logs in a folder, stopped by Ctrl-C (in the
// foreground) or by `lockstep cluster down`.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"
#include "clients/cluster/cluster_processes.h"

namespace lockstep::cli {
namespace {

namespace fs = std::filesystem;

// Whether `pid` still runs one of the cluster's servers: a recorded pid may have been
// reused by an unrelated process since.
bool IsClusterServer(pid_t pid) {
  std::error_code ec;
  const std::string exe = fs::read_symlink(absl::StrCat("/proc/", pid, "/exe"), ec).filename();
  return !ec && (exe == "lockstep-coordinator" || exe == "lockstep-worker");
}

int Up(Args& args) {
  auto workers = ParseInt("workers", args.Value("workers", "2"));
  if (!workers.ok()) return Fail(workers.status());
  const int n = *workers;
  const std::string dir = args.Value("dir", DefaultClusterDir());
  const bool detach = args.Flag("detach");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  auto threads = ParseInt(
      "threads", args.Value("threads", std::to_string(std::max(1u, cores / std::max(1, n)))));
  if (!threads.ok()) return Fail(threads.status());
  auto port = ParseInt("port", args.Value("port", "0"));
  if (!port.ok()) return Fail(port.status());
  if (!args.Done() || !args.Positional().empty() || n < 1) {
    absl::FPrintF(stderr,
                  "usage: lockstep cluster up [--workers N] [--threads T] [--dir DIR] "
                  "[--port P] [--detach]\n");
    return 2;
  }
  auto coord_bin = FindBinary("lockstep-coordinator");
  auto worker_bin = FindBinary("lockstep-worker");
  if (!coord_bin.ok()) return Fail(coord_bin.status());
  if (!worker_bin.ok()) return Fail(worker_bin.status());
  if (fs::exists(fs::path(dir) / "cluster.json")) {
    return Fail(absl::AlreadyExistsError(absl::StrCat(
        "a cluster is recorded in ", dir, "/cluster.json: run `lockstep cluster down` first")));
  }
  // Block Ctrl-C before starting anything, so the foreground loop below receives it.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (!detach) pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // Several servers share this host's cores: OpenMP threads that sleep rather than spin
  // while waiting cost nothing when idle and much less under contention.
  setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0);
  ClusterOptions options;
  options.dir = dir;
  options.coordinator_binary = *coord_bin;
  options.worker_binary = *worker_bin;
  options.port = *port;
  options.workers = n;
  options.threads_per_worker = *threads;
  options.detach = detach;
  auto cluster = ClusterProcesses::Start(options);
  if (!cluster.ok()) return Fail(cluster.status());
  const std::string address = (*cluster)->address();
  nlohmann::json record = {{"coordinator", address}, {"pids", (*cluster)->pids()}, {"workers", n}};
  std::ofstream(fs::path(dir) / "cluster.json") << record.dump(2) << "\n";
  absl::PrintF("cluster up: coordinator %s, %d workers (%d threads each), logs in %s/logs\n",
               address, n, *threads, dir);
  if (detach) {
    (*cluster)->Detach();
    absl::PrintF("export LOCKSTEP_COORDINATOR=%s   # stop with: lockstep cluster down\n", address);
    return 0;
  }
  absl::PrintF("press Ctrl-C to stop\n");
  std::fflush(stdout);
  // Wait for Ctrl-C (or SIGTERM), or for a process of the cluster to die.
  timespec tick = {0, 200 * 1000 * 1000};
  while (sigtimedwait(&set, nullptr, &tick) <= 0) {
    if (!(*cluster)->AllRunning()) {
      absl::FPrintF(stderr, "a cluster process exited; stopping the cluster (see %s/logs)\n", dir);
      break;
    }
  }
  (*cluster)->Stop(absl::Seconds(10));
  fs::remove(fs::path(dir) / "cluster.json");
  absl::PrintF("cluster stopped\n");
  return 0;
}

int Down(Args& args) {
  const std::string dir = args.Value("dir", DefaultClusterDir());
  if (!args.Done() || !args.Positional().empty()) {
    absl::FPrintF(stderr, "usage: lockstep cluster down [--dir DIR]\n");
    return 2;
  }
  std::ifstream in(fs::path(dir) / "cluster.json");
  if (!in) return Fail(absl::NotFoundError(absl::StrCat("no cluster recorded in ", dir)));
  std::vector<pid_t> recorded, pids;
  try {
    recorded = nlohmann::json::parse(in).at("pids").get<std::vector<pid_t>>();
  } catch (const std::exception& e) {
    return Fail(absl::DataLossError(absl::StrCat(dir, "/cluster.json: ", e.what())));
  }
  for (pid_t p : recorded) {
    if (IsClusterServer(p)) pids.push_back(p);
  }
  StopProcesses(pids, absl::Seconds(10));
  fs::remove(fs::path(dir) / "cluster.json");
  absl::PrintF("cluster down: stopped %d processes (%d recorded were no longer running)\n",
               pids.size(), recorded.size() - pids.size());
  return 0;
}

}  // namespace

int ClusterCommand(const std::string& sub, Args& args) {
  if (sub == "up") return Up(args);
  if (sub == "down") return Down(args);
  absl::FPrintF(stderr, "usage: lockstep cluster up|down [options]\n");
  return 2;
}

}  // namespace lockstep::cli
