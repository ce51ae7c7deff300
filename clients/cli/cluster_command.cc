// `lockstep cluster up|down`: a local cluster of one coordinator and N CPU workers as
// processes on loopback, with free ports, logs in a folder, stopped by Ctrl-C (in the
// foreground) or by `lockstep cluster down`.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"
#include "services/common/flags.h"
#include "services/common/status.h"

extern char** environ;

namespace lockstep::cli {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& log,
                            bool detach) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Children start with default signal handling and an empty mask, and in their own
  // process group so that Ctrl-C reaches only `lockstep`, which stops them in order.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  flags |= detach ? POSIX_SPAWN_SETSID : POSIX_SPAWN_SETPGROUP;
  posix_spawnattr_setflags(&attr, flags);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", strerror(rc)));
  return pid;
}

bool Running(pid_t pid) {
  int status;
  if (waitpid(pid, &status, WNOHANG) == pid) return false;  // our child, exited
  return kill(pid, 0) == 0;
}

// Whether `pid` still runs one of the cluster's servers: a recorded pid may have been
// reused by an unrelated process since.
bool IsClusterServer(pid_t pid) {
  std::error_code ec;
  const std::string exe = fs::read_symlink(absl::StrCat("/proc/", pid, "/exe"), ec).filename();
  return !ec && (exe == "lockstep-coordinator" || exe == "lockstep-worker");
}

// SIGTERM, then SIGKILL after `grace`.
void Stop(const std::vector<pid_t>& pids, absl::Duration grace) {
  for (pid_t p : pids) kill(p, SIGTERM);
  const absl::Time end = absl::Now() + grace;
  for (pid_t p : pids) {
    while (Running(p) && absl::Now() < end) absl::SleepFor(absl::Milliseconds(50));
    if (Running(p)) kill(p, SIGKILL);
  }
}

int Up(Args& args) {
  auto workers = ParseInt("workers", args.Value("workers", "2"));
  if (!workers.ok()) return Fail(workers.status());
  const int n = *workers;
  const std::string dir = args.Value("dir", DefaultClusterDir());
  const bool detach = args.Flag("detach");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string threads =
      args.Value("threads", std::to_string(std::max(1u, cores / std::max(1, n))));
  const std::string port = args.Value("port", "0");
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
  fs::create_directories(fs::path(dir) / "logs");
  const std::string port_file = (fs::path(dir) / "coordinator.port").string();
  fs::remove(port_file);
  // Block Ctrl-C before starting anything, so the foreground loop below receives it.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (!detach) pthread_sigmask(SIG_BLOCK, &set, nullptr);

  // Several servers share this host's cores: OpenMP threads that sleep rather than spin
  // while waiting cost nothing when idle and much less under contention.
  setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0);
  std::vector<pid_t> pids;
  auto coord = Spawn({*coord_bin, "--listen=127.0.0.1:" + port, "--state_dir=" + dir + "/state",
                      "--port_file=" + port_file},
                     dir + "/logs/coordinator.log", detach);
  if (!coord.ok()) return Fail(coord.status());
  pids.push_back(*coord);
  const std::string bound = ReadPortFile(port_file, absl::Seconds(20));
  if (bound.empty()) {
    Stop(pids, absl::Seconds(2));
    return Fail(absl::UnavailableError("the coordinator did not start; see " + dir +
                                       "/logs/coordinator.log"));
  }
  const std::string address = "127.0.0.1:" + bound;
  for (int i = 0; i < n; ++i) {
    auto w = Spawn(
        {*worker_bin, "--coordinator=" + address, "--listen=127.0.0.1:0",
         "--advertise_host=127.0.0.1", "--threads=" + threads, absl::StrCat("--name=worker-", i)},
        absl::StrCat(dir, "/logs/worker-", i, ".log"), detach);
    if (!w.ok()) {
      Stop(pids, absl::Seconds(2));
      return Fail(w.status());
    }
    pids.push_back(*w);
  }
  nlohmann::json record = {{"coordinator", address}, {"pids", pids}, {"workers", n}};
  std::ofstream(fs::path(dir) / "cluster.json") << record.dump(2) << "\n";
  // Ready when every worker has registered.
  auto stub = Connect(address);
  const absl::Time end = absl::Now() + absl::Seconds(60);
  int registered = 0;
  while (absl::Now() < end) {
    auto ctx = Deadline(5);
    v1::ListWorkersResponse resp;
    if (stub->ListWorkers(ctx.get(), v1::ListWorkersRequest(), &resp).ok()) {
      registered = resp.workers_size();
      if (registered >= n) break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (registered < n) {
    Stop(pids, absl::Seconds(5));
    fs::remove(fs::path(dir) / "cluster.json");
    return Fail(absl::UnavailableError(absl::StrCat(
        "only ", registered, " of ", n, " workers registered within 60 s; see ", dir, "/logs")));
  }
  absl::PrintF("cluster up: coordinator %s, %d workers (%s threads each), logs in %s/logs\n",
               address, n, threads, dir);
  if (detach) {
    absl::PrintF("export LOCKSTEP_COORDINATOR=%s   # stop with: lockstep cluster down\n", address);
    return 0;
  }
  absl::PrintF("press Ctrl-C to stop\n");
  std::fflush(stdout);
  // Wait for Ctrl-C (or SIGTERM), or for a process of the cluster to die.
  timespec tick = {0, 200 * 1000 * 1000};
  while (true) {
    if (sigtimedwait(&set, nullptr, &tick) > 0) break;
    bool all_up = true;
    for (pid_t p : pids) all_up = all_up && Running(p);
    if (!all_up) {
      absl::FPrintF(stderr, "a cluster process exited; stopping the cluster (see %s/logs)\n", dir);
      break;
    }
  }
  Stop(pids, absl::Seconds(10));
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
  Stop(pids, absl::Seconds(10));
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
