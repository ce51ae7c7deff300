// lockstep-train SPEC [--json] [--data DIR] [--threads N] [-o FILE [--force]]: what
// `lockstep train` runs.
// Trains a job spec in this process: the coordinator's job loop over one in-process CPU
// worker (services/standalone), with a live progress bar and each evaluation, or one
// JSON object at the end. A spec asking for N workers trains its N replicas as logical
// replicas in this process (`replicas: N`): the same run as on a cluster.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/cli/args.h"
#include "clients/cli/data_option.h"
#include "clients/cli/job_text.h"
#include "clients/cli/progress.h"
#include "core/spec/spec.h"
#include "services/common/security/private_files.h"
#include "services/standalone/local_job.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep::cli {
namespace {

// Renders the job's events, and keeps what the final report needs.
class Printer final : public JobSink {
 public:
  explicit Printer(bool quiet) : quiet_(quiet), events_(kLocalJobId) {}
  void OnRunning(int64_t) override {}
  void OnStep(const v1::StepEvent& e) override {
    last_loss = e.loss();
    steps = e.step();
    Show([&](v1::JobEvent& ev) { *ev.mutable_step() = e; });
  }
  void OnEval(const v1::EvalResult& r) override {
    last_eval = r;
    Show([&](v1::JobEvent& ev) { *ev.mutable_eval() = r; });
  }
  void Finish() { events_.Finish(); }

  float last_loss = 0;
  int64_t steps = 0;
  v1::EvalResult last_eval;

 private:
  template <typename F>
  void Show(F fill) {
    if (quiet_) return;
    v1::JobEvent ev;
    fill(ev);
    events_.Print(ev);
  }
  const bool quiet_;
  EventPrinter events_;
};

int Main(int argc, char** argv) {
  std::unique_ptr<CLI::App> app = NewApp(
      "Train a job spec (YAML or JSON) in this process, on the CPU. A spec's `workers: "
      "N` trains as N logical replicas here (replicas: N): each replica's shard of the "
      "batch, its dropout keys and BatchNorm statistics, as on N workers",
      "lockstep train");
  std::string spec_file, data, output;
  bool json = false, force = false;
  int threads = 0;
  app->add_option("SPEC", spec_file, "the job spec file")->required();
  app->add_flag("--json", json, "print one JSON object at the end, no progress");
  app->add_option("--data", data, kDataOptionHelp);
  app->add_option("--threads", threads, "CPU threads (0: the spec's, else all cores)")
      ->check(AtLeast(0));
  app->add_option("-o,--output", output,
                  "write the trained state to FILE (safetensors, Flax names; in place of the "
                  "spec's checkpoint_path); an existing FILE only with --force")
      ->type_name("FILE");
  app->add_flag("--force", force, "with -o: overwrite FILE if it exists");
  if (std::optional<int> exit_code = Parse(*app, argc, argv)) return *exit_code;
  if (!output.empty()) {
    std::error_code ec;
    if (!force && std::filesystem::exists(output, ec)) {
      return Fail(absl::AlreadyExistsError(
          absl::StrCat(output, " exists: pass --force to overwrite it, or another -o FILE")));
    }
  }
  auto parsed = LoadSpecFile(spec_file);
  if (!parsed.ok()) return FailArgumentFile(parsed.status());
  if (!data.empty()) {
    if (absl::Status st = ApplyDataFolder(data, parsed->mutable_dataset()); !st.ok()) {
      return Fail(st);
    }
  }
  if (threads > 0) parsed->set_threads(threads);
  if (!output.empty())
    parsed->set_checkpoint_path(std::filesystem::absolute(output).lexically_normal().string());
  auto spec = Validate(*parsed, {.files_in_checkpoint_dir = false});  // this user's own files
  if (!spec.ok()) return Fail(spec.status());
  if (absl::Status fits = CheckModelFitsInstalledDataset(*spec); !fits.ok()) return Fail(fits);
  if (spec->workers() != 1) {
    // The spec's N replicas, as logical replicas in this one process: the cluster's run
    // (each replica's batch shard, dropout keys and BatchNorm statistics), never one of
    // N = 1. With `replicas` it is the same bits as on any number of workers.
    if (!json && spec->replicas() == 0) {
      absl::FPrintF(stderr,
                    "note: workers: %d trains here as %d logical replicas in one process "
                    "(replicas: %d): the cluster's run, to float rounding in the gradients' "
                    "mean\n",
                    spec->workers(), spec->workers(), spec->workers());
    }
    if (spec->replicas() == 0) spec->set_replicas(spec->workers());
    spec->set_workers(1);
    spec->clear_min_workers();
    spec->clear_audit();  // it checks one machine's worker against another's: one process here
  }
  if (spec->threads() == 0) spec->set_threads(DefaultCpuThreads());
  Printer printer(json);
  absl::StatusOr<JobOutcome> result = RunLocalJob(*spec, &printer);
  printer.Finish();
  if (!result.ok()) return Fail(result.status());
  const v1::EvalResult& test = printer.last_eval;
  if (json) {
    nlohmann::json out = {{"test_accuracy", test.test_accuracy()},
                          {"test_loss", test.test_loss()},
                          {"final_train_loss", printer.last_loss},
                          {"steps", printer.steps},
                          {"samples_per_sec", result->samples_per_sec},
                          {"train_seconds", result->train_seconds},
                          {"threads", spec->threads()},
                          // As the job API's JSON prints a uint64: a decimal string;
                          // and as the dashboard and the text show it: 16 hex digits.
                          {"param_checksum", absl::StrCat(result->param_checksum)},
                          {"param_checksum_hex", Hex64(result->param_checksum)}};
    if (!result->checkpoint_path.empty()) out["checkpoint"] = result->checkpoint_path;
    absl::PrintF("%s\n", out.dump());
  } else {
    absl::PrintF("test accuracy %.4f  test loss %.4f  (%d steps, %.0f samples/s)\n",
                 test.test_accuracy(), test.test_loss(), printer.steps, result->samples_per_sec);
    absl::PrintF("params checksum %s\n", Hex64(result->param_checksum));
    if (!result->checkpoint_path.empty()) absl::PrintF("checkpoint %s\n", result->checkpoint_path);
  }
  return 0;
}

}  // namespace
}  // namespace lockstep::cli

int main(int argc, char** argv) {
  // The job loop's log lines (about its job and worker) go to stderr: stdout is the
  // result's (--json).
  spdlog::set_default_logger(spdlog::stderr_color_mt("lockstep-train"));
  lockstep::SetPrivateUmask();  // what it writes (checkpoints) is the owner's only
  return lockstep::cli::Main(argc, argv);
}
