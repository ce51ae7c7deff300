// coordinator_scale: what the coordinator's job loop costs as the number of workers grows
// (issue 15, part 5). For each N it starts a real lockstep-coordinator (plaintext), N
// simulated workers in this process (bench/scale/fake_workers.h: real gRPC, a port and a
// registry connection each, a simulated step of --compute_ms), runs one job over all of
// them through the coordinator's JobManager and JobRunner, and prints per N:
//  - step wall time (the coordinator's StepEvent.wall_ms, averaged after a warm-up) and
//    the coordinator's overhead, wall - compute, in ms and % of the step;
//  - how long the workers waited for step commands past the previous step's end (the
//    dispatch that shows through the pipeline);
//  - the coordinator's CPU per step (utime + stime from /proc/PID/stat), its CPU per
//    second while idle with N workers heartbeating, its RSS (before the workers, with
//    them idle, while stepping, and peak), threads and open file descriptors;
//  - how long Prepare (the state's replication to every worker) took.
// Usage: coordinator_scale [--workers 1,16,64,256,1024] [--steps_in_flight K]
//        [--compute_ms 100] [--warmup 10] [--steps 30] [--model mlp|cnn]
//        [--job_memory_budget_mb MB] [--bin_dir DIR] (DIR holds the lockstep-coordinator to
//        measure; default: this build's)
// Needs about 3 file descriptors per worker in this process and 2 in the coordinator: it
// raises its soft RLIMIT_NOFILE to the hard limit (the coordinator inherits it).
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/scale/fake_workers.h"
#include "clients/cluster/cluster_processes.h"
#include "core/status_macros.h"
#include "lockstep/v1/job.grpc.pb.h"
#include "services/common/rpc/status.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

struct Usage {
  double cpu_s = 0;  // utime + stime
  double rss_mb = 0, hwm_mb = 0;
  int threads = 0, fds = 0;
  absl::Time at;
};

Usage UsageOf(pid_t pid) {
  Usage u;
  u.at = absl::Now();
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) u.threads = std::stoi(line.substr(8));
    if (line.rfind("VmRSS:", 0) == 0) u.rss_mb = std::stod(line.substr(6)) / 1024;
    if (line.rfind("VmHWM:", 0) == 0) u.hwm_mb = std::stod(line.substr(6)) / 1024;
  }
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis: state is field 3; utime, stime 14, 15.
  std::vector<std::string> f = absl::StrSplit(all.substr(all.rfind(')') + 2), ' ');
  if (f.size() > 13) u.cpu_s = (std::stod(f[11]) + std::stod(f[12])) / sysconf(_SC_CLK_TCK);
  std::error_code ec;
  for (auto it = fs::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    ++u.fds;
  }
  return u;
}

struct Options {
  std::vector<int> workers = {1, 16, 64, 256, 1024};
  int steps_in_flight = 4;
  int compute_ms = 100;
  int warmup = 10, steps = 30;
  std::string model = "mlp";
  int64_t job_memory_budget_mb = 768;  // the coordinator's default
  std::string bin_dir = std::string(LOCKSTEP_BINARY_DIR) + "/services";
};

struct Row {
  int n = 0;
  double wall_ms = 0, late_ms = 0, period_ms = 0, cpu_ms_per_step = 0, idle_cpu_pct = 0;
  double prepare_s = 0;
  int64_t heartbeats_failed = 0;
  Usage base, idle, stepping;
};

v1::JobSpec ScaleSpec(const Options& o, int n) {
  v1::JobSpec spec;
  spec.mutable_model()->set_kind(o.model);
  if (o.model == "mlp") spec.mutable_model()->add_hidden(8);  // 6,370 params: 25 KB
  spec.mutable_optimizer()->set_kind("sgd");
  spec.mutable_optimizer()->set_learning_rate(0.01);
  spec.mutable_optimizer()->set_momentum(0.9);  // one optimizer slot, as the CNN bench's
  spec.set_global_batch_size(32 * n);           // 32 per worker
  spec.set_steps(o.warmup + o.steps);
  spec.set_workers(n);
  return spec;
}

// Runs the job and fills the row's step figures from its events and the coordinator's
// usage at the warm-up's end and the measurement's.
absl::Status RunJob(v1::JobService::Stub& jobs, const Options& o, pid_t pid, FakeWorkers& fakes,
                    Row* row) {
  v1::Job job;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    RETURN_IF_ERROR(FromGrpcStatus(jobs.SubmitJob(&ctx, ScaleSpec(o, row->n), &job)));
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(10)));
  v1::WatchJobRequest req;
  req.set_id(job.id());
  auto reader = jobs.WatchJob(&ctx, req);
  v1::JobEvent e;
  Usage begin;
  double wall_sum = 0;
  v1::JobState end_state = v1::JOB_STATE_UNSPECIFIED;
  std::string reason;
  while (reader->Read(&e)) {
    if (e.has_step()) {
      const int64_t s = e.step().step();
      if (s == o.warmup) begin = UsageOf(pid);
      if (s > o.warmup && s <= o.warmup + o.steps) wall_sum += e.step().wall_ms();
      if (s == o.warmup + o.steps) row->stepping = UsageOf(pid);
    }
    if (e.has_state()) {
      end_state = e.state().state();
      reason = e.state().reason();
    }
  }
  RETURN_IF_ERROR(FromGrpcStatus(reader->Finish()));
  if (end_state != v1::SUCCEEDED) {
    return absl::InternalError(
        absl::StrCat("job ", job.id(), " ended ", v1::JobState_Name(end_state), ": ", reason));
  }
  row->wall_ms = wall_sum / o.steps;
  row->cpu_ms_per_step = 1000 * (row->stepping.cpu_s - begin.cpu_s) / o.steps;
  const JobTiming t = fakes.Timing(job.id());
  row->prepare_s = absl::ToDoubleSeconds(t.prepare_end - t.prepare_begin);
  row->late_ms = t.steps > 0 ? absl::ToDoubleMilliseconds(t.late) / t.steps : 0;
  if (t.steps > 1) {
    row->period_ms = absl::ToDoubleMilliseconds(t.last_answer - t.first_answer) / (t.steps - 1);
  }
  return absl::OkStatus();
}

absl::StatusOr<Row> Round(const Options& o, int n) {
  ClusterOptions c;
  c.dir =
      (fs::temp_directory_path() / absl::StrCat("coordinator-scale-", getpid(), "-", n)).string();
  c.coordinator_binary = o.bin_dir + "/lockstep-coordinator";
  c.worker_binary = o.bin_dir + "/lockstep-worker";  // not started: the workers are fakes
  c.insecure = true;
  c.coordinator_flags = {absl::StrCat("--max_workers_per_job=", std::max(64, n)),
                         absl::StrCat("--steps_in_flight=", o.steps_in_flight),
                         absl::StrCat("--job_memory_budget_mb=", o.job_memory_budget_mb)};
  auto cluster = ClusterProcesses::Start(c);
  if (!cluster.ok()) return cluster.status();
  const pid_t pid = (*cluster)->pids()[0];
  absl::FPrintF(stderr, "%d workers: coordinator pid %d\n", n, pid);
  Row row;
  row.n = n;
  absl::SleepFor(absl::Seconds(1));
  row.base = UsageOf(pid);
  FakeWorkerOptions f;
  f.workers = n;
  f.compute = absl::Milliseconds(o.compute_ms);
  auto fakes = FakeWorkers::Start((*cluster)->address(), f);
  if (!fakes.ok()) return fakes.status();
  // Heartbeats in their steady state: the idle cost of N registered workers.
  absl::SleepFor(absl::Seconds(2));
  const Usage idle_begin = UsageOf(pid);
  absl::SleepFor(absl::Seconds(3));
  row.idle = UsageOf(pid);
  row.idle_cpu_pct = 100 * (row.idle.cpu_s - idle_begin.cpu_s) /
                     absl::ToDoubleSeconds(row.idle.at - idle_begin.at);
  auto stub = v1::JobService::NewStub((*cluster)->Channel());
  absl::Status st = RunJob(*stub, o, pid, **fakes, &row);
  row.stepping.hwm_mb = UsageOf(pid).hwm_mb;
  row.heartbeats_failed = (*fakes)->heartbeats_failed();
  fakes->reset();
  cluster->reset();
  fs::remove_all(c.dir);
  if (!st.ok()) return st;
  return row;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

int Main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--workers") {
      o.workers.clear();
      for (absl::string_view w : absl::StrSplit(value, ','))
        o.workers.push_back(std::stoi(std::string(w)));
    }
    if (flag == "--steps_in_flight") o.steps_in_flight = std::stoi(value);
    if (flag == "--compute_ms") o.compute_ms = std::stoi(value);
    if (flag == "--warmup") o.warmup = std::stoi(value);
    if (flag == "--steps") o.steps = std::stoi(value);
    if (flag == "--model") o.model = value;
    if (flag == "--job_memory_budget_mb") o.job_memory_budget_mb = std::stoll(value);
    if (flag == "--bin_dir") o.bin_dir = value;
  }
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  absl::PrintF(
      "coordinator_scale: %s; model %s, sgd+momentum, 32 examples per worker, %d ms simulated "
      "compute, %d steps in flight, %d steps measured after %d; RLIMIT_NOFILE %d; load "
      "before: %s\n\n",
      o.bin_dir + "/lockstep-coordinator", o.model, o.compute_ms, o.steps_in_flight, o.steps,
      o.warmup, static_cast<int>(files.rlim_cur), LoadAverage());
  absl::PrintF(
      "| workers | step wall ms | overhead ms (%% of step) | workers' period ms | command wait "
      "ms/step | "
      "coordinator CPU ms/step | idle CPU %% (heartbeats) | RSS MiB: before / idle / "
      "stepping / peak | threads | fds | prepare s | load |\n");
  absl::PrintF("|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|\n");
  std::fflush(stdout);
  for (int n : o.workers) {
    absl::StatusOr<Row> r = Round(o, n);
    if (!r.ok()) {
      absl::FPrintF(stderr, "%d workers: %s\n", n, r.status().ToString());
      return 1;
    }
    const double overhead = r->wall_ms - o.compute_ms;
    absl::PrintF(
        "| %d | %.2f | %.2f (%.2f%%) | %.2f | %.3f | %.2f | %.2f | %.1f / %.1f / %.1f / %.1f | %d "
        "| %d | "
        "%.3f | %s |\n",
        n, r->wall_ms, overhead, 100 * overhead / r->wall_ms, r->period_ms, r->late_ms,
        r->cpu_ms_per_step, r->idle_cpu_pct, r->base.rss_mb, r->idle.rss_mb, r->stepping.rss_mb,
        r->stepping.hwm_mb, r->stepping.threads, r->stepping.fds, r->prepare_s, LoadAverage());
    if (r->heartbeats_failed > 0) {
      absl::PrintF("(%d workers: %d heartbeats failed)\n", n, r->heartbeats_failed);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) { return lockstep::Main(argc, argv); }
