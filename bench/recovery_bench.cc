// Recovery, measured (issue: fault tolerance), one table per part, times from the
// coordinator's event stamps (JobEvent.unix_ms; one machine, one clock):
//  1. kill -9 of a worker at random steps of a running 2-worker job on a 3-worker cluster
//     (a spare is started after each trial): per trial the step killed at, the snapshot the
//     job went back to, the steps replayed, kill -> RECOVERING, kill -> first replayed step
//     and kill -> back at the killed step;
//  2. kill -9 of the coordinator and a restart on the same state directory: restart ->
//     the job RUNNING again, and -> its first step;
//  3. snapshot overhead on the CNN (2 workers, global batch 128): the job's wall time with
//     no snapshot and with one every K steps, rounds alternating; the cost of a snapshot,
//     and the overhead at the default cadence (every 1000 steps or 60 s, the sooner).
//  1b. the same with SIGSTOP (a stall) instead of a kill;
// Usage: recovery_bench [--trials N] [--stalls N] [--restarts N] [--snapshot_every K]
//                       [--rounds R] [--cnn_steps S]
#include <signal.h>

#include <algorithm>
#include <random>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "bench/job_stats.h"
#include "services/common/rpc/job_state.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep {
namespace {

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

// Every event of one job, reconnecting while the coordinator is away.
class Watcher {
 public:
  Watcher(testing::LocalCluster& c, std::string id)
      : c_(c), id_(std::move(id)), thread_([this] { Loop(); }) {}
  ~Watcher() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      if (ctx_ != nullptr) ctx_->TryCancel();
    }
    thread_.join();
  }

  // The first event after `after_ms` that `match` accepts, waiting up to `timeout`.
  std::optional<v1::JobEvent> First(int64_t after_ms,
                                    const std::function<bool(const v1::JobEvent&)>& match,
                                    absl::Duration timeout = absl::Minutes(3)) {
    const absl::Time end = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    size_t seen = 0;
    while (true) {
      for (; seen < events_.size(); ++seen) {
        const v1::JobEvent& e = events_[seen];
        if (e.unix_ms() >= after_ms && match(e)) return e;
      }
      const auto more = [&] { return events_.size() > seen; };
      if (!mu_.AwaitWithDeadline(absl::Condition(&more), end)) {
        return std::nullopt;
      }
    }
  }
  int64_t LastStep() {
    absl::MutexLock lock(&mu_);
    for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
      if (it->has_step()) return it->step().step();
    }
    return 0;
  }

 private:
  void Loop() {
    while (true) {
      auto ctx = std::make_unique<grpc::ClientContext>();
      {
        absl::MutexLock lock(&mu_);
        if (stop_) return;
        ctx_ = ctx.get();
      }
      v1::WatchJobRequest req;
      req.set_id(id_);
      auto reader = c_.jobs().WatchJob(ctx.get(), req);
      v1::JobEvent e;
      bool ended = false;
      while (reader->Read(&e)) {
        ended = e.has_state() && IsTerminal(e.state().state());
        absl::MutexLock lock(&mu_);
        events_.push_back(e);
      }
      reader->Finish();
      {
        absl::MutexLock lock(&mu_);
        ctx_ = nullptr;
        if (stop_ || ended) return;
      }
      absl::SleepFor(absl::Milliseconds(50));  // the coordinator restarts
    }
  }

  testing::LocalCluster& c_;
  const std::string id_;
  absl::Mutex mu_;
  std::vector<v1::JobEvent> events_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

bool IsStep(const v1::JobEvent& e) { return e.has_step(); }

v1::JobSpec MlpJob(int snapshot_every) {
  v1::JobSpec spec;
  spec.mutable_model()->set_kind("mlp");
  spec.mutable_model()->add_hidden(1024);
  spec.mutable_model()->add_hidden(1024);
  spec.mutable_model()->set_dropout_rate(0.1);
  spec.mutable_optimizer()->set_kind("adam");
  spec.mutable_optimizer()->set_learning_rate(1e-3);
  spec.set_global_batch_size(256);
  spec.set_steps(10000000);
  spec.set_workers(2);
  spec.mutable_recovery()->set_snapshot_every_steps(snapshot_every);
  spec.mutable_recovery()->set_max_restarts(1000);
  return spec;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// `trials` faults of one of the job's workers: SIGKILL, or SIGSTOP (a stall; the worker is
// continued after the trial and registers again).
int WorkerFaults(int trials, int snapshot_every, int signal) {
  auto cluster = testing::LocalCluster::Start(3);
  if (!cluster.ok()) {
    absl::FPrintF(stderr, "%s\n", cluster.status().ToString());
    return 1;
  }
  testing::LocalCluster& c = **cluster;
  auto job = c.Submit(MlpJob(snapshot_every));
  if (!job.ok()) return 1;
  Watcher w(c, job->id());
  std::mt19937 rng(7);
  const char* what = signal == SIGKILL ? "kill -9" : "SIGSTOP";
  absl::PrintF(
      "## Worker %s (MLP 784-1024-1024-10, dropout, batch 256, 2 of 3 workers, a "
      "snapshot every %d steps)\n\n"
      "| trial | fault at step | snapshot | steps replayed | fault -> RECOVERING ms | fault -> "
      "first replayed step ms | fault -> back at the step ms |\n|---|---|---|---|---|---|---|\n",
      what, snapshot_every);
  std::vector<double> detect, first, back, replayed;
  for (int t = 1; t <= trials; ++t) {
    const int64_t target = w.LastStep() + std::uniform_int_distribution<int>(20, 150)(rng);
    if (!w.First(0,
                 [&](const v1::JobEvent& e) { return IsStep(e) && e.step().step() >= target; })) {
      absl::FPrintF(stderr, "the job did not reach step %d\n%s\n", target, c.Logs());
      return 1;
    }
    auto victim = c.WorkerOf(job->id());
    if (!victim.ok()) return 1;
    const int64_t kill_ms = NowMs();
    if (signal == SIGKILL) {
      c.KillWorker(*victim);
    } else {
      c.SignalWorker(*victim, signal);
    }
    const int64_t killed_at = w.LastStep();
    auto recovering = w.First(kill_ms, [](const v1::JobEvent& e) {
      return e.has_state() && e.state().state() == v1::RECOVERING;
    });
    auto replay = w.First(kill_ms, IsStep);
    auto again = w.First(
        kill_ms, [&](const v1::JobEvent& e) { return IsStep(e) && e.step().step() >= killed_at; });
    if (!recovering || !replay || !again) {
      absl::FPrintF(stderr, "trial %d: the job did not recover\n%s\n", t, c.Logs());
      return 1;
    }
    const int64_t snapshot = replay->step().step() - 1;
    detect.push_back(recovering->unix_ms() - kill_ms);
    first.push_back(replay->unix_ms() - kill_ms);
    back.push_back(again->unix_ms() - kill_ms);
    replayed.push_back(killed_at - snapshot);
    absl::PrintF("| %d | %d | %d | %d | %d | %d | %d |\n", t, killed_at, snapshot,
                 killed_at - snapshot, recovering->unix_ms() - kill_ms, replay->unix_ms() - kill_ms,
                 again->unix_ms() - kill_ms);
    if (signal == SIGKILL) {
      if (!c.AddWorker().ok()) return 1;  // the next trial's spare
    } else {
      c.SignalWorker(*victim, SIGCONT);  // it registers again: the next trial's spare
      absl::SleepFor(absl::Seconds(2));
    }
  }
  absl::PrintF("| median | | | %.0f | %.0f | %.0f | %.0f |\n", Median(replayed), Median(detect),
               Median(first), Median(back));
  absl::PrintF("| max | | | %.0f | %.0f | %.0f | %.0f |\n\n",
               *std::max_element(replayed.begin(), replayed.end()),
               *std::max_element(detect.begin(), detect.end()),
               *std::max_element(first.begin(), first.end()),
               *std::max_element(back.begin(), back.end()));
  c.Cancel(job->id()).IgnoreError();
  return 0;
}

int CoordinatorRestarts(int restarts) {
  auto cluster = testing::LocalCluster::Start(2);
  if (!cluster.ok()) return 1;
  testing::LocalCluster& c = **cluster;
  auto job = c.Submit(MlpJob(100));
  if (!job.ok()) return 1;
  Watcher w(c, job->id());
  absl::PrintF(
      "## Coordinator kill -9 and restart (same job, a snapshot every 100 steps)\n\n"
      "| restart | step at the kill | resumed from | restart -> RUNNING ms | restart -> first "
      "step ms |\n|---|---|---|---|---|\n");
  std::vector<double> running, first;
  for (int t = 1; t <= restarts; ++t) {
    const int64_t target = w.LastStep() + 150;
    if (!w.First(0, [&](const v1::JobEvent& e) { return IsStep(e) && e.step().step() >= target; }))
      return 1;
    const int64_t at = w.LastStep();
    const int64_t restart_ms = NowMs();
    if (!c.RestartCoordinator().ok()) return 1;
    auto run = w.First(restart_ms, [](const v1::JobEvent& e) {
      return e.has_state() && e.state().state() == v1::RUNNING;
    });
    auto step = run ? w.First(run->unix_ms(), IsStep) : std::nullopt;  // the new coordinator's
    if (!run || !step) {
      absl::FPrintF(stderr, "restart %d: the job did not resume\n%s\n", t, c.Logs());
      return 1;
    }
    running.push_back(run->unix_ms() - restart_ms);
    first.push_back(step->unix_ms() - restart_ms);
    absl::PrintF("| %d | %d | %d | %d | %d |\n", t, at, step->step().step() - 1,
                 run->unix_ms() - restart_ms, step->unix_ms() - restart_ms);
  }
  absl::PrintF("| median | | | %.0f | %.0f |\n\n", Median(running), Median(first));
  c.Cancel(job->id()).IgnoreError();
  return 0;
}

v1::JobSpec CnnJob(int steps, int snapshot_every) {
  v1::JobSpec spec = CnnSpec(2, steps);
  spec.mutable_recovery()->set_snapshot_every_steps(snapshot_every);
  spec.mutable_recovery()->set_snapshot_every_seconds(1000000);
  return spec;
}

// The job's wall time from RUNNING to its end, in seconds.
absl::StatusOr<double> CnnWall(testing::LocalCluster& c, int steps, int snapshot_every) {
  auto job = c.Submit(CnnJob(steps, snapshot_every));
  if (!job.ok()) return job.status();
  Watcher w(c, job->id());
  auto run = w.First(
      0, [](const v1::JobEvent& e) { return e.has_state() && e.state().state() == v1::RUNNING; });
  auto end = w.First(
      0, [](const v1::JobEvent& e) { return e.has_state() && IsTerminal(e.state().state()); },
      absl::Minutes(10));
  if (!run || !end || end->state().state() != v1::SUCCEEDED) {
    return absl::InternalError("the CNN job did not succeed\n" + c.Logs());
  }
  return (end->unix_ms() - run->unix_ms()) / 1000.0;
}

int SnapshotOverhead(int rounds, int steps, int every) {
  auto cluster = testing::LocalCluster::Start(2);
  if (!cluster.ok()) return 1;
  std::vector<double> without, with;
  for (int r = 0; r < rounds; ++r) {
    auto a = CnnWall(**cluster, steps, 100000000);
    auto b = CnnWall(**cluster, steps, every);
    if (!a.ok() || !b.ok()) {
      absl::FPrintF(stderr, "%s %s\n", a.status().ToString(), b.status().ToString());
      return 1;
    }
    without.push_back(*a);
    with.push_back(*b);
  }
  const int snapshots = (steps - 1) / every;
  const double cost = (Median(with) - Median(without)) / snapshots;
  const double step = Median(without) / steps;
  const double cadence = std::min(60.0, 1000 * step);
  absl::PrintF(
      "## Snapshot overhead (CNN, global batch 128, 2 workers, %d steps, median of %d rounds)\n\n"
      "| no snapshot s | a snapshot every %d steps s | snapshots | cost of one s | step s | "
      "default cadence s | overhead at the default |\n|---|---|---|---|---|---|---|\n"
      "| %.2f | %.2f | %d | %.3f | %.4f | %.0f | %.2f%% |\n\n",
      steps, rounds, every, Median(without), Median(with), snapshots, cost, step, cadence,
      100 * std::max(0.0, cost) / cadence);
  return 0;
}

int Main(int argc, char** argv) {
  int trials = 10, stalls = 3, restarts = 3, every = 100, rounds = 3, cnn_steps = 300;
  const int cnn_every = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = std::stoi(argv[i + 1]);
    if (flag == "--trials") trials = v;
    if (flag == "--restarts") restarts = v;
    if (flag == "--stalls") stalls = v;
    if (flag == "--snapshot_every") every = v;
    if (flag == "--rounds") rounds = v;
    if (flag == "--cnn_steps") cnn_steps = v;
  }
  // A part with no trials (rounds) is left out.
  if (int rc = trials > 0 ? WorkerFaults(trials, every, SIGKILL) : 0; rc != 0) return rc;
  if (int rc = stalls > 0 ? WorkerFaults(stalls, every, SIGSTOP) : 0; rc != 0) return rc;
  if (int rc = restarts > 0 ? CoordinatorRestarts(restarts) : 0; rc != 0) return rc;
  return rounds > 0 ? SnapshotOverhead(rounds, cnn_steps, cnn_every) : 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) { return lockstep::Main(argc, argv); }
