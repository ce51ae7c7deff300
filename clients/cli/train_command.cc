// `lockstep train SPEC`: the single-process trainer (N = 1, no network).
#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "clients/cli/commands.h"
#include "clients/cli/progress.h"
#include "core/spec/spec.h"
#include "core/trainer.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep::cli {
namespace {

class Printer final : public TrainObserver {
 public:
  explicit Printer(bool quiet) : quiet_(quiet) {}
  void OnStep(const TrainProgress& p) override {
    if (!quiet_) bar_.Update(p.step, p.total, p.loss, -1, p.samples_per_sec, p.eta_sec);
  }
  void OnEval(int64_t epoch, int64_t step, const EvalMetrics& m) override {
    if (!quiet_) bar_.Println(FormatEval(epoch, step, m.loss, m.accuracy));
  }
  void Finish() { bar_.Finish(); }

 private:
  bool quiet_;
  ProgressBar bar_;
};

}  // namespace

int TrainCommand(Args& args) {
  const bool json = args.Flag("json");
  const std::string data = args.Value("data", "");
  const std::string threads = args.Value("threads", "");
  std::vector<std::string> pos = args.Positional();
  if (!args.Done() || pos.size() != 1) {
    absl::FPrintF(stderr, "usage: lockstep train SPEC [--json] [--data DIR] [--threads N]\n");
    return 2;
  }
  auto parsed = LoadSpecFile(pos[0]);
  if (!parsed.ok()) return Fail(parsed.status());
  if (!data.empty()) parsed->mutable_dataset()->set_path(data);
  if (!threads.empty()) {
    auto n = ParseInt("threads", threads);
    if (!n.ok()) return Fail(n.status());
    parsed->set_threads(*n);
  }
  auto spec = Validate(*parsed);
  if (!spec.ok()) return Fail(spec.status());
  if (spec->device() != "cpu") {
    return Fail(absl::InvalidArgumentError(
        "device: lockstep train runs on the CPU; submit cuda jobs to a cluster"));
  }
  if (spec->workers() != 1) {
    // One process is N = 1: the same parameters as N workers without dropout.
    if (!json)
      absl::FPrintF(stderr, "note: workers: %d ignored; training in one process\n",
                    spec->workers());
    spec->set_workers(1);
  }
  SetCpuThreads(static_cast<int>(spec->threads()));
  auto backend = NewCpuBackend();
  Printer printer(json);
  auto result = Train(*spec, backend.get(), &printer);
  printer.Finish();
  if (!result.ok()) return Fail(result.status());
  if (json) {
    nlohmann::json out = {{"test_accuracy", result->test.accuracy},
                          {"test_loss", result->test.loss},
                          {"final_train_loss", result->final_train_loss},
                          {"steps", result->steps},
                          {"samples_per_sec", result->samples_per_sec},
                          {"train_seconds", result->train_seconds},
                          {"threads", CpuThreads()}};
    absl::PrintF("%s\n", out.dump());
  } else {
    absl::PrintF("test accuracy %.4f  test loss %.4f  (%d steps, %.0f samples/s)\n",
                 result->test.accuracy, result->test.loss, result->steps, result->samples_per_sec);
  }
  return 0;
}

}  // namespace lockstep::cli
