// watchers_bench: what concurrent WatchJob streams cost the coordinator. Starts a local
// cluster (1 worker), runs a long job, opens N watchers of it at once (gRPC's callback
// client API: this process pins no thread per stream either), waits until every watcher
// has received live step events, and prints the coordinator's threads and RSS before and
// with the watchers.
// Usage: watchers_bench [--watchers N] [--bin_dir DIR] (DIR holds lockstep-coordinator and
// lockstep-worker; default: this build's)
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "clients/cluster/cluster_processes.h"
#include "lockstep/v1/job.grpc.pb.h"
#include "services/common/rpc/net.h"
#include "services/common/rpc/status.h"

namespace lockstep {
namespace {

struct Usage {
  int threads = 0;
  double rss_mb = 0;
};

Usage UsageOf(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  Usage u;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) u.threads = std::stoi(line.substr(8));
    if (line.rfind("VmRSS:", 0) == 0) u.rss_mb = std::stod(line.substr(6)) / 1024;
  }
  return u;
}

// One watcher: counts the step events it receives.
class Watcher final : public grpc::ClientReadReactor<v1::JobEvent> {
 public:
  Watcher(v1::JobService::Stub* stub, const std::string& id) {
    req_.set_id(id);
    stub->async()->WatchJob(&ctx_, &req_, this);
    StartRead(&event_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (event_.has_step()) ++steps;
    StartRead(&event_);
  }
  void OnDone(const grpc::Status& s) override {
    status = s;
    done.Notify();
  }
  void Cancel() { ctx_.TryCancel(); }

  std::atomic<int64_t> steps{0};
  grpc::Status status;
  absl::Notification done;

 private:
  grpc::ClientContext ctx_;
  v1::WatchJobRequest req_;
  v1::JobEvent event_;
};

int Main(int argc, char** argv) {
  int n = 1000;
  std::string bin_dir = std::string(LOCKSTEP_BINARY_DIR) + "/services";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--watchers") n = std::stoi(argv[i + 1]);
    if (std::string(argv[i]) == "--bin_dir") bin_dir = argv[i + 1];
  }
  ClusterOptions options;
  options.dir =
      (std::filesystem::temp_directory_path() / absl::StrCat("watchers-", getpid())).string();
  options.coordinator_binary = bin_dir + "/lockstep-coordinator";
  options.worker_binary = bin_dir + "/lockstep-worker";
  options.workers = 1;
  options.coordinator_flags = {absl::StrCat("--max_watchers=", std::max(n + 1, 256))};
  auto cluster = ClusterProcesses::Start(options);
  if (!cluster.ok()) {
    absl::FPrintF(stderr, "%s\n", cluster.status().ToString());
    return 1;
  }
  const pid_t coordinator = (*cluster)->pids()[0];
  auto stub = v1::JobService::NewStub((*cluster)->Channel());
  v1::JobSpec spec;
  spec.mutable_model()->set_kind("mlp");
  spec.mutable_model()->add_hidden(32);
  spec.mutable_optimizer()->set_kind("sgd");
  spec.mutable_optimizer()->set_learning_rate(0.01);
  spec.set_global_batch_size(32);
  spec.set_steps(100000000);
  v1::Job job;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    if (absl::Status st = FromGrpcStatus(stub->SubmitJob(&ctx, spec, &job)); !st.ok()) {
      absl::FPrintF(stderr, "submit: %s\n", st.ToString());
      return 1;
    }
  }
  // Running, with a quiet moment for the baseline figure.
  Watcher first(stub.get(), job.id());
  while (first.steps < 50 && !first.done.HasBeenNotified()) absl::SleepFor(absl::Milliseconds(20));
  const Usage before = UsageOf(coordinator);
  std::vector<std::unique_ptr<Watcher>> watchers;
  for (int i = 0; i < n; ++i) watchers.push_back(std::make_unique<Watcher>(stub.get(), job.id()));
  // Every watcher has live events, well after its history.
  const absl::Time end = absl::Now() + absl::Seconds(120);
  for (int i = 0; i < n && absl::Now() < end;) {
    if (watchers[i]->done.HasBeenNotified() || watchers[i]->steps >= 100) {
      ++i;
    } else {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  absl::SleepFor(absl::Seconds(2));  // steady state
  const Usage with = UsageOf(coordinator);
  int live = 0, refused = 0;
  int64_t min_steps = INT64_MAX;
  for (auto& w : watchers) {
    if (w->done.HasBeenNotified()) {
      ++refused;
    } else {
      ++live;
      min_steps = std::min<int64_t>(min_steps, w->steps);
    }
  }
  for (auto& w : watchers) w->Cancel();
  first.Cancel();
  for (auto& w : watchers) w->done.WaitForNotification();
  first.done.WaitForNotification();
  absl::PrintF(
      "coordinator %s, %d watchers of one running job (%d streaming, %d refused; "
      "each streaming one got >= %d step events)\n\n",
      options.coordinator_binary, n, live, refused, live > 0 ? min_steps : 0);
  absl::PrintF("| | threads | RSS MiB |\n|---|---:|---:|\n");
  absl::PrintF("| 1 watcher | %d | %.1f |\n", before.threads, before.rss_mb);
  absl::PrintF("| +%d watchers | %d | %.1f |\n", n, with.threads, with.rss_mb);
  absl::PrintF("| per added watcher | %.3f | %.1f KiB |\n",
               static_cast<double>(with.threads - before.threads) / n,
               (with.rss_mb - before.rss_mb) * 1024 / n);
  std::filesystem::remove_all(options.dir);
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) { return lockstep::Main(argc, argv); }
