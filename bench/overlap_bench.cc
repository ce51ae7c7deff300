// What overlapping the gradients' all-reduce with backward buys (issues 15, 23): the CNN
// (824,458 params) or the MLP 784-512-512-10 (669,706) trained data-parallel by N worker
// processes over Gloo, each with its own CPU backend, round by round through the modes of
// --bucket_kib: 0 is no overlap (one all-reduce of all gradients after backward), K > 0
// gradient buckets of at least K KiB started as backward produces them (StepExecutor::
// set_allreduce_bucket_bytes). Per mode it prints the step time, compute (forward and
// backward), the exposed all-reduce (from the end of backward until every bucket is done
// and divided by N) and the update, each the median over a round's steps, best round of
// --rounds (rounds cycle through the modes, so all see the same machine load), as seen by
// rank 0; and each mode's step time over the first mode's. With --exact 1 every mode runs
// twice in each round: as above, and as a job of N logical replicas (one per worker,
// StepReplicas: the exact reduction of core/exact_sum.h in the same buckets), the two
// interleaved; each exact row's step time is also given over its float row's.
//
//   overlap_bench [--model cnn|mlp] [--workers N] [--batch B] [--threads T] [--steps S]
//                 [--rounds R] [--bucket_kib K[,K...]]   (default 0,64) [--exact 0|1]
// spawns N ranks of itself on 127.0.0.1; bench/netem/run starts them one per network
// namespace instead, each with
//   overlap_bench --workers N --rank R --store DIR --host ADDR ...
// (DIR: a folder all ranks see, the rendezvous; ADDR: the address Gloo binds). B is the
// batch per worker (default 64: global 128 for 2 workers).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/data/random_dataset.h"
#include "core/optimizer_spec.h"
#include "core/status_macros.h"
#include "core/step.h"
#include "core/store.h"
#include "workers/cpu/cpu_backend.h"
#include "workers/gloo/gloo_collective.h"

namespace lockstep {
namespace {

struct Flags {
  int workers = 2, batch = 64, threads = 1, steps = 20, rounds = 3;
  bool exact = false;               // each mode also as N logical replicas (the exact reduction)
  std::string model = "cnn";        // cnn, or mlp (784-512-512-10, as in bench/cpu/run)
  std::string bucket_kib = "0,64";  // the modes, interleaved: bucket sizes, 0 = no overlap
  int rank = -1;                    // -1: spawn the ranks
  std::string store, host = "127.0.0.1";
};

// A Store of files in a folder every rank sees (written whole, then renamed into place).
class FileStore final : public Store {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    const std::string path = Path(key), tmp = absl::StrCat(path, ".tmp", getpid());
    {
      std::ofstream out(tmp, std::ios::binary);
      out << value;
      if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) return absl::InternalError(absl::StrCat("rename ", tmp, ": ", ec.message()));
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    const absl::Time end = absl::Now() + timeout;
    for (;;) {
      std::ifstream in(Path(key), std::ios::binary);
      if (in.good()) {
        std::stringstream s;
        s << in.rdbuf();
        return s.str();
      }
      if (absl::Now() > end) {
        return absl::DeadlineExceededError(absl::StrCat("store key \"", key, "\" not set"));
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }

 private:
  std::string Path(const std::string& key) const {
    std::string name = key;
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    return absl::StrCat(dir_, "/", name);
  }
  std::string dir_;
};

struct Row {
  double step = 0, compute = 0, allreduce = 0, update = 0;  // ms
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One rank: joins the mesh, then measures the modes round after round.
absl::Status RunRank(const Flags& f) {
  FileStore store(f.store);
  GlooOptions options;
  options.hostname = f.host;
  options.prefix = "overlap";
  options.connect_timeout = absl::Seconds(60);
  ASSIGN_OR_RETURN(std::unique_ptr<Collective> collective,
                   GlooCollective::Create(f.rank, f.workers, &store, options));
  std::unique_ptr<Backend> backend = NewCpuBackend(f.threads);
  v1::OptimizerSpec adam;
  adam.set_kind("adam");
  adam.set_learning_rate(1e-3);
  ASSIGN_OR_RETURN(Optimizer opt, OptimizerFromSpec(adam));
  const Model model = f.model == "mlp" ? Model::Mlp({512, 512}, 0.0) : Model::Cnn();
  // executors[1]: the same job on N logical replicas, this rank's its own (--exact).
  std::unique_ptr<StepExecutor> executors[2];
  std::vector<DeviceDataset> device_data(2);
  const Dataset data = RandomDataset(int64_t{f.batch} * f.workers * 8, 1);
  for (int e = 0; e < (f.exact ? 2 : 1); ++e) {
    ASSIGN_OR_RETURN(executors[e], StepExecutor::Create(model, opt, rng::Impl::kPartitionable,
                                                        f.batch, backend.get(), collective.get()));
    RETURN_IF_ERROR(executors[e]->SetState(
        TrainState::Create(model.Init(rng::Key{0, 0}, rng::Impl::kPartitionable), opt)));
    if (e == 1) RETURN_IF_ERROR(executors[e]->SetLogicalReplicas(f.workers, f.rank, 1));
    ASSIGN_OR_RETURN(device_data[e], executors[e]->Upload(data));
  }
  std::vector<int32_t> idx(f.batch);
  int64_t step = 0;
  auto one_step = [&](int e) -> absl::StatusOr<Row> {
    const int64_t at = (step % 8) * f.batch * f.workers + int64_t{f.rank} * f.batch;
    for (int i = 0; i < f.batch; ++i) idx[i] = static_cast<int32_t>(at + i);
    const rng::Key key{0, static_cast<uint32_t>(step++)};
    const auto t0 = std::chrono::steady_clock::now();
    if (e == 0) {
      RETURN_IF_ERROR(executors[e]->Step(device_data[e], idx, key).status());
    } else {
      RETURN_IF_ERROR(executors[e]->StepReplicas(device_data[e], idx, {&key, 1}).status());
    }
    const StepExecutor::Timings& t = executors[e]->last_timings();
    return Row{
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
        t.compute * 1000, t.allreduce * 1000, t.update * 1000};
  };
  std::vector<size_t> bucket_bytes;
  for (absl::string_view kib : absl::StrSplit(f.bucket_kib, ',')) {
    bucket_bytes.push_back(size_t{static_cast<unsigned>(std::stoi(std::string(kib)))} * 1024);
  }
  const size_t modes = bucket_bytes.size(), kinds = f.exact ? 2 : 1;
  std::vector<Row> best(modes * kinds);  // mode m's float row at 2m (m), its exact one at 2m + 1
  for (int round = 0; round < f.rounds; ++round) {
    for (size_t mode = 0; mode < modes; ++mode) {
      for (size_t e = 0; e < kinds; ++e) {
        executors[e]->set_allreduce_bucket_bytes(bucket_bytes[mode]);
        RETURN_IF_ERROR(one_step(e).status());  // settles the mode
        std::vector<double> st, co, ar, up;
        for (int s = 0; s < f.steps; ++s) {
          ASSIGN_OR_RETURN(Row r, one_step(e));
          st.push_back(r.step);
          co.push_back(r.compute);
          ar.push_back(r.allreduce);
          up.push_back(r.update);
        }
        const Row med{Median(st), Median(co), Median(ar), Median(up)};
        Row& b = best[mode * kinds + e];
        if (round == 0 || med.step < b.step) b = med;
      }
    }
  }
  if (f.rank != 0) return absl::OkStatus();
  std::printf(
      "%s (%zu params), %d workers x batch %d (global %d), %d thread(s) each, %d steps x %d "
      "rounds; rank 0, best round's medians (ms)\n",
      f.model.c_str(), model.layout().total(), f.workers, f.batch, f.batch * f.workers, f.threads,
      f.steps, f.rounds);
  std::printf(
      "| bucket | step | compute | exposed all-reduce | update | step / first row's |%s\n"
      "|---|---|---|---|---|---|%s\n",
      f.exact ? " samples/s exact / float |" : "", f.exact ? "---|" : "");
  for (size_t row = 0; row < best.size(); ++row) {
    const size_t mode = row / kinds;
    const bool exact = row % kinds == 1;
    const std::string name =
        absl::StrCat(bucket_bytes[mode] == 0 ? std::string("none (one all-reduce after backward)")
                                             : absl::StrCat(bucket_bytes[mode] / 1024, " KiB"),
                     exact ? ", exact (logical replicas)" : "");
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.3f |", name.c_str(), best[row].step,
                best[row].compute, best[row].allreduce, best[row].update,
                best[0].step > 0 ? best[row].step / best[0].step : 0);
    if (f.exact) {
      std::printf(exact ? " %.3f |\n" : " |\n",
                  best[row - 1].step > 0 ? best[row - 1].step / best[row].step : 0);
    } else {
      std::printf("\n");
    }
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

// Spawns the ranks on loopback, with a temporary store folder.
int Spawn(const Flags& f, char* self) {
  char dir_template[] = "/tmp/overlap_bench.XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < f.workers; ++r) {
    std::vector<std::string> args = {self,
                                     "--workers",
                                     std::to_string(f.workers),
                                     "--rank",
                                     std::to_string(r),
                                     "--store",
                                     dir,
                                     "--host",
                                     f.host,
                                     "--batch",
                                     std::to_string(f.batch),
                                     "--threads",
                                     std::to_string(f.threads),
                                     "--steps",
                                     std::to_string(f.steps),
                                     "--rounds",
                                     std::to_string(f.rounds),
                                     "--bucket_kib",
                                     f.bucket_kib,
                                     "--model",
                                     f.model,
                                     "--exact",
                                     f.exact ? "1" : "0"};
    const pid_t pid = fork();
    if (pid == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv("/proc/self/exe", argv.data());
      std::perror("execv");
      _exit(127);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  std::filesystem::remove_all(dir);
  return failed == 0 ? 0 : 1;
}

int Main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--workers")
      f.workers = std::stoi(value);
    else if (flag == "--batch")
      f.batch = std::stoi(value);
    else if (flag == "--threads")
      f.threads = std::stoi(value);
    else if (flag == "--steps")
      f.steps = std::stoi(value);
    else if (flag == "--rounds")
      f.rounds = std::stoi(value);
    else if (flag == "--bucket_kib")
      f.bucket_kib = value;
    else if (flag == "--model")
      f.model = value;
    else if (flag == "--exact")
      f.exact = value == "1";
    else if (flag == "--rank")
      f.rank = std::stoi(value);
    else if (flag == "--store")
      f.store = value;
    else if (flag == "--host")
      f.host = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const bool kib_ok = !f.bucket_kib.empty() &&
                      f.bucket_kib.find_first_not_of("0123456789,") == std::string::npos &&
                      f.bucket_kib.find(",,") == std::string::npos && f.bucket_kib.front() != ',' &&
                      f.bucket_kib.back() != ',';
  if (f.workers < 2 || f.batch < 1 || f.steps < 1 || f.rounds < 1 || !kib_ok ||
      (f.model != "cnn" && f.model != "mlp")) {
    std::fprintf(stderr,
                 "need --workers >= 2, positive --batch, --steps, --rounds, --model cnn|mlp "
                 "and --bucket_kib K[,K...] (KiB, 0: no overlap)\n");
    return 2;
  }
  if (f.rank < 0) return Spawn(f, argv[0]);
  if (f.store.empty()) {
    std::fprintf(stderr, "--rank needs --store\n");
    return 2;
  }
  absl::Status st = RunRank(f);
  if (!st.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", f.rank, st.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) { return lockstep::Main(argc, argv); }
