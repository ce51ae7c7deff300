// job_bench: runs one training job through a running coordinator and prints, as one JSON
// line, its throughput after a warm-up, the per-step time split, and the step's FLOPs
// (3x the forward pass) for comparison with a floor. Used by bench/gpu/check.sh.
// Usage: job_bench --coordinator HOST:PORT --data DIR --model cnn|mlp --batch B --steps S
//                  [--device cpu|cuda] [--workers N] [--warmup W] [--hidden 512,512]
//                  [--timeout SECONDS]   (then the job is cancelled and job_bench fails)
//        job_bench --coordinator HOST:PORT --spec FILE --model LABEL --batch B --steps S ...
// --data is the Fashion-MNIST IDX directory as the workers see it: required, since a
// default that exists here but not on the machine that runs the job fails every job.
// --spec runs a job spec file (YAML or JSON: its model, optimizer and dataset, paths as
// the workers see them) under the name --model, with --batch, --steps, --device and
// --workers as given; a sequence model's JSON line adds tokens_per_sec.
// Exit status: 0 with the JSON line, 1 when the job fails, 2 for bad arguments.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/job_stats.h"
#include "core/model.h"
#include "core/model_spec.h"
#include "core/spec/spec.h"
#include "services/common/rpc/net.h"

int main(int argc, char** argv) {
  using namespace lockstep;
  std::map<std::string, std::string> a = {
      {"model", "cnn"}, {"batch", "128"}, {"steps", "500"},      {"device", "cuda"},
      {"workers", "1"}, {"warmup", "50"}, {"hidden", "512,512"}, {"coordinator", "127.0.0.1:7070"},
      {"data", ""},     {"timeout", "0"}, {"spec", ""}};
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag.rfind("--", 0) != 0 || !a.contains(flag.substr(2)) || i + 1 == argc) {
      absl::FPrintF(stderr, "job_bench: bad argument %s (flags: see bench/job_bench.cc)\n", flag);
      return 2;
    }
    a[flag.substr(2)] = argv[i + 1];
  }
  if (a["data"].empty() && a["spec"].empty()) {
    absl::FPrintF(stderr, "job_bench: --data DIR (the dataset's IDX directory) is required\n");
    return 2;
  }
  v1::JobSpec spec;
  if (!a["spec"].empty()) {  // its own model, optimizer and dataset
    std::ifstream in(a["spec"]);
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<v1::JobSpec> parsed = ParseSpec(text.str(), a["spec"]);
    if (!in || !parsed.ok()) {
      absl::FPrintF(stderr, "job_bench: --spec %s: %s\n", a["spec"],
                    in ? parsed.status().ToString() : "cannot be read");
      return 2;
    }
    spec = *std::move(parsed);
    spec.clear_epochs();
    spec.clear_eval();
    // The evaluation's batch as training's: the default, 1000 windows of a long context,
    // needs far more memory than the step (17 GiB for the quick GPT-2-small decoder).
    spec.mutable_eval()->set_batch_size(std::stoi(a["batch"]));
  } else {
    spec.mutable_dataset()->set_path(a["data"]);
    spec.mutable_model()->set_kind(a["model"]);
    if (a["model"] == "mlp") {
      for (auto w : absl::StrSplit(a["hidden"], ','))
        spec.mutable_model()->add_hidden(std::stoi(std::string(w)));
      spec.mutable_optimizer()->set_kind("adam");
      spec.mutable_optimizer()->set_learning_rate(1e-3);
    } else {
      spec.mutable_optimizer()->set_kind("sgd");
      spec.mutable_optimizer()->set_learning_rate(0.1);
      spec.mutable_optimizer()->set_momentum(0.9);
    }
  }
  spec.set_global_batch_size(std::stoi(a["batch"]));
  spec.set_steps(std::stoll(a["steps"]));
  spec.set_device(a["device"]);
  spec.set_workers(std::stoi(a["workers"]));
  auto model = ModelFromSpec(spec.model());
  if (!model.ok()) {
    absl::FPrintF(stderr, "%s\n", model.status().ToString());
    return 2;
  }
  // A benchmark on loopback: the coordinator it measures runs with --insecure.
  auto stub = v1::JobService::NewStub(MakeChannel(a["coordinator"], Transport::Plaintext(), ""));
  const int timeout = std::stoi(a["timeout"]);
  auto s = RunAndMeasure(*stub, spec, std::stoi(a["warmup"]),
                         timeout > 0 ? absl::Seconds(timeout) : absl::InfiniteDuration());
  if (!s.ok()) {
    absl::FPrintF(stderr, "job_bench: %s %s batch %s failed: %s\n", a["model"], a["device"],
                  a["batch"], s.status().ToString());
    return 1;
  }
  nlohmann::json out = {
      {"model", a["model"]},
      {"batch", spec.global_batch_size()},
      {"device", a["device"]},
      {"workers", s->workers},
      {"measured_steps", s->steps},
      {"samples_per_sec", s->samples_per_sec},
      {"us_per_step", s->wall * 1000},
      {"worker_us_per_step", s->worker * 1000},
      {"flops_per_step", 3.0 * model->ForwardFlopsPerSample() * spec.global_batch_size()}};
  if (model->positions() > 1) out["tokens_per_sec"] = s->samples_per_sec * model->positions();
  absl::PrintF("%s\n", out.dump());
  return 0;
}
