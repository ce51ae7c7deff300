// Elastic jobs (docs/elastic.md, bench/results/elastic.md), on a local cluster:
//  1. shrink and join latency: one `replicas: 4` job (the BatchNorm convnet with dropout
//     of tests/cluster/elastic_test) on 3 workers {min 1, max 3}; `--kills` times its
//     rank-0 worker is killed (SIGKILL) and, 10 to 40 steps later (drawn), a new worker
//     started.
//     Shrink latency: kill -> the first step completed after the job's "resized ... lost"
//     event; join latency: the new worker's start -> the first step completed after the
//     "resized ... joined" event. The job's checksum is compared with `lockstep train`'s.
//  2. Throughput: the Flax MNIST CNN (sgd) and the MLP 784-512-512-10 (adam) at global
//     batch 128 on 2 workers with `replicas: 4`, `replicas: 2` (the exact reduction) and
//     without `replicas` (the float all-reduce), interleaved in each of `--rounds` rounds
//     (the job's samples/s), with each round's ratios.
// Usage: elastic_bench [--kills K] [--rounds R] [--steps S] [--threads T] [--verbose 1]
//                      [--models cnn,mlp]
#include <algorithm>
#include <cstdio>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/spec/spec.h"
#include "services/standalone/local_job.h"
#include "tests/cluster/elastic_spec.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep {
namespace {

v1::JobSpec Parse(const std::string& text) {
  absl::StatusOr<v1::JobSpec> spec = ParseSpec(text, "elastic_bench");
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", spec.status().ToString().c_str());
    std::exit(1);
  }
  return *spec;
}

v1::JobSpec ConvnetSpec(int steps) {
  return Parse(absl::StrCat(testing::kElasticSpecYaml,
                            "workers: {min: 1, max: 3}\n"
                            "eval: {every_steps: 1000000, batch_size: 1000}\n",
                            "steps: ", steps, "\n"));
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Latencies(int kills, bool verbose) {
  std::mt19937 random(kills);  // the steps between changes: 10 to 40, drawn
  std::uniform_int_distribution<int> gaps(10, 40);
  const int steps = 12000;  // more than the changes take; it runs to its end after them
  const v1::JobSpec spec = ConvnetSpec(steps);
  auto cluster = testing::LocalCluster::Start(3);
  if (!cluster.ok()) return std::fprintf(stderr, "%s\n", cluster.status().ToString().c_str()), 1;
  testing::LocalCluster& c = **cluster;
  absl::StatusOr<v1::Job> job = c.Submit(spec);
  if (!job.ok()) return std::fprintf(stderr, "%s\n", job.status().ToString().c_str()), 1;
  std::vector<int64_t> killed_ms, added_ms;
  // Each change waits until the job has taken the previous one (its workers count) and
  // gone a drawn number of steps further with it: a bounded wait on the job's steps, not on the
  // clock. The job lists a newcomer as soon as its grow begins; the steps after that listing are
  // the ones computed with it (a kill sooner would land in the grow, not after it).
  int64_t at = gaps(random);
  auto settle = [&](int workers) {
    const int gap = gaps(random);
    bool listed = false;  // the previous wait already saw `workers`
    for (int tries = 0; tries < 200; ++tries) {
      absl::StatusOr<v1::Job> j = c.WaitForStep(job->id(), at, absl::Minutes(2));
      if (!j.ok()) return false;
      at = j->step() + gap;
      if (j->workers_size() == workers && listed) return true;
      listed = j->workers_size() == workers;
    }
    return false;
  };
  for (int i = 0; i < kills; ++i) {
    if (!settle(3)) break;
    absl::StatusOr<int> victim = c.WorkerOf(job->id());
    if (!victim.ok()) break;
    killed_ms.push_back(absl::ToUnixMillis(absl::Now()));
    c.KillWorker(*victim);
    if (!settle(2)) break;
    added_ms.push_back(absl::ToUnixMillis(absl::Now()));
    if (!c.AddWorker().ok()) break;
  }
  absl::StatusOr<std::vector<v1::JobEvent>> events = c.Events(job->id());
  absl::StatusOr<v1::Job> done = c.WaitFor(job->id(), absl::Minutes(5));
  if (!events.ok() || !done.ok()) return std::fprintf(stderr, "the job was lost\n"), 1;
  if (verbose) {  // what the servers said about resizes and released jobs
    for (absl::string_view line : absl::StrSplit(c.Logs(), '\n')) {
      if (absl::StrContains(line, "keep_state") || absl::StrContains(line, "dropped") ||
          absl::StrContains(line, "released") || absl::StrContains(line, "resize")) {
        std::printf("  log: %.300s\n", std::string(line).c_str());
      }
    }
  }
  // The first step completed after each resize event, by kind.
  std::vector<int64_t> lost_step_ms, joined_step_ms;
  std::vector<int64_t>* waiting = nullptr;
  int replayed = 0;
  for (const v1::JobEvent& e : *events) {
    if (e.has_state() && verbose) {
      std::printf("  event: %s %.300s\n", v1::JobState_Name(e.state().state()).c_str(),
                  e.state().reason().c_str());
    }
    if (e.has_state() && e.state().reason().rfind("resized", 0) == 0) {
      const bool lost = e.state().reason().find(" lost ") != std::string::npos;
      waiting = lost ? &lost_step_ms : &joined_step_ms;
    }
    if (e.has_step()) {
      if (e.step().replay()) ++replayed;
      if (waiting != nullptr) waiting->push_back(e.unix_ms());
      waiting = nullptr;
    }
  }
  std::vector<double> shrink, join;
  for (size_t i = 0; i < killed_ms.size() && i < lost_step_ms.size(); ++i) {
    shrink.push_back(lost_step_ms[i] - killed_ms[i]);
  }
  for (size_t i = 0; i < added_ms.size() && i < joined_step_ms.size(); ++i) {
    join.push_back(joined_step_ms[i] - added_ms[i]);
  }
  v1::JobSpec local = spec;
  local.set_workers(1);
  local.clear_min_workers();
  NullJobSink sink;
  absl::StatusOr<JobOutcome> undisturbed =
      RunLocalJob(*Validate(local, {.files_in_checkpoint_dir = false}), &sink);
  std::printf(
      "job: %s, %d steps, %zu kills, %zu joins; a step completed after %zu/%zu "
      "shrink events and %zu/%zu join events (a kill may come first); %d steps "
      "replayed, recoveries %d\n",
      v1::JobState_Name(done->state()).c_str(), steps, killed_ms.size(), added_ms.size(),
      lost_step_ms.size(), killed_ms.size(), joined_step_ms.size(), added_ms.size(), replayed,
      done->recoveries());
  std::printf("checksum %016llx, undisturbed (lockstep train) %016llx: %s\n",
              static_cast<unsigned long long>(done->param_checksum()),
              undisturbed.ok() ? static_cast<unsigned long long>(undisturbed->param_checksum) : 0,
              undisturbed.ok() && undisturbed->param_checksum == done->param_checksum() ? "equal"
                                                                                        : "DIFFER");
  std::printf("shrink latency (kill -> next step done): median %.0f ms, max %.0f ms over %zu\n",
              Median(shrink), shrink.empty() ? 0 : *std::max_element(shrink.begin(), shrink.end()),
              shrink.size());
  std::printf(
      "join latency (worker started -> first step with it done): median %.0f ms, "
      "max %.0f ms over %zu\n",
      Median(join), join.empty() ? 0 : *std::max_element(join.begin(), join.end()), join.size());
  return 0;
}

// The samples/s of `model` ("cnn" or "mlp") with `replicas: 4` and `replicas: 2` (the
// exact reduction), and without `replicas` (V = N: the float all-reduce), the three
// alternating in each round; each round's ratios and the medians.
int Throughput(const std::string& model, int rounds, int steps, int threads) {
  auto cluster = testing::LocalCluster::Start(2, {}, threads);
  if (!cluster.ok()) return std::fprintf(stderr, "%s\n", cluster.status().ToString().c_str()), 1;
  const std::string recipe =
      model == "mlp" ? "model: {kind: mlp, hidden: [512, 512]}\noptimizer: {kind: adam, "
                       "learning_rate: 0.001}\n"
                     : "model: {kind: cnn}\noptimizer: {kind: sgd, learning_rate: 0.1, "
                       "momentum: 0.9}\n";
  const int kinds[] = {4, 2, 0};  // replicas; 0: none
  std::vector<double> rate[3], two_vs_none, four_vs_two;
  for (int r = 0; r < rounds; ++r) {
    double round[3];
    for (int k = 0; k < 3; ++k) {
      v1::JobSpec spec = Parse(absl::StrCat(
          recipe, "global_batch_size: 128\nworkers: 2\n",
          "eval: {every_steps: 1000000, batch_size: 1000}\nthreads: ", threads, "\nsteps: ", steps,
          "\n", kinds[k] > 0 ? absl::StrCat("replicas: ", kinds[k], "\n") : ""));
      absl::StatusOr<v1::Job> job = (*cluster)->Submit(spec);
      if (!job.ok()) return std::fprintf(stderr, "%s\n", job.status().ToString().c_str()), 1;
      absl::StatusOr<v1::Job> done = (*cluster)->WaitFor(job->id(), absl::Minutes(20));
      if (!done.ok() || done->state() != v1::SUCCEEDED) {
        return std::fprintf(stderr, "job failed: %s\n",
                            done.ok() ? done->failure_reason().c_str() : "lost"),
               1;
      }
      rate[k].push_back(round[k] = done->samples_per_sec());
    }
    two_vs_none.push_back(round[2] > 0 ? round[1] / round[2] : 0);
    four_vs_two.push_back(round[1] > 0 ? round[0] / round[1] : 0);
    std::printf(
        "%s round %d: replicas 4 %.1f, replicas 2 %.1f, none %.1f samples/s; "
        "2 vs none %.2fx, 4 vs 2 %.2fx\n",
        model.c_str(), r, round[0], round[1], round[2], two_vs_none.back(), four_vs_two.back());
  }
  std::printf(
      "%s B=128 on 2 workers (%d threads each), medians of %d rounds: replicas 4 %.1f "
      "samples/s, replicas 2 %.1f, no replicas (float all-reduce) %.1f; per round 2 vs none "
      "%.2fx, 4 vs 2 %.2fx (medians)\n",
      model.c_str(), threads, rounds, Median(rate[0]), Median(rate[1]), Median(rate[2]),
      Median(two_vs_none), Median(four_vs_two));
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  int kills = 10, rounds = 3, steps = 30, threads = 1;
  std::vector<std::string> models = {"cnn"};
  bool verbose = false;        // --verbose 1: every state event's reason
  bool usage = argc % 2 == 0;  // a flag without its value (--help), or an unknown one
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--models") {
      models = absl::StrSplit(argv[i + 1], ',');
      for (const std::string& m : models) usage = usage || (m != "cnn" && m != "mlp");
    } else if (flag == "--kills") {
      kills = value;
    } else if (flag == "--rounds") {
      rounds = value;
    } else if (flag == "--steps") {
      steps = value;
    } else if (flag == "--threads") {
      threads = value;
    } else if (flag == "--verbose") {
      verbose = value != 0;
    } else {
      usage = true;
    }
  }
  if (usage) {
    std::fprintf(stderr,
                 "usage: elastic_bench [--kills K] [--rounds R] [--steps S] [--threads T] "
                 "[--verbose 1] [--models cnn,mlp]\n");
    return 2;
  }
  int rc = kills > 0 ? lockstep::Latencies(kills, verbose) : 0;
  for (const std::string& model : models) {
    if (rc == 0 && rounds > 0) rc = lockstep::Throughput(model, rounds, steps, threads);
  }
  return rc;
}
