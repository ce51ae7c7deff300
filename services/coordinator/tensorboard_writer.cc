#include "services/coordinator/tensorboard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/io/paths.h"
#include "core/io/tfrecord.h"
#include "core/learning_rate.h"
#include "services/common/job_log.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

// Events queued and not yet written, past which new ones are dropped (a stuck disk).
constexpr size_t kMaxQueued = 100000;

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

tensorboard::Event Scalars(int64_t step, int64_t unix_ms,
                           std::initializer_list<std::pair<const char*, double>> values) {
  tensorboard::Event event;
  event.set_wall_time(static_cast<double>(unix_ms) / 1000.0);
  event.set_step(step);
  for (const auto& [tag, value] : values) {
    tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return event;
}

}  // namespace

absl::StatusOr<std::string> PrepareTensorBoardFolder(const std::string& root,
                                                     const std::string& job_id,
                                                     const std::string& name) {
  const fs::path p(name);
  bool up = false;
  for (const fs::path& part : p) up = up || part == "..";
  if (p.is_absolute() || up) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensorboard_dir: \"", name, "\" must be relative and stay in its folder (no \"..\")"));
  }
  const fs::path dir = name.empty() ? fs::path(root) / job_id : fs::path(root) / job_id / p;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("tensorboard_dir: cannot make ", dir.string(), ": ", ec.message()));
  }
  // The job's folder is ROOT/JOB itself, never where a link of that name points.
  const fs::path job_folder = ResolvePath(root) / job_id;
  const fs::path resolved = ResolvePath(dir);
  if (resolved.empty() || !IsWithin(resolved, job_folder)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensorboard_dir: \"", name, "\" leads out of the job's folder (a symbolic link?)"));
  }
  return resolved.string();
}

std::function<double(int64_t)> LearningRateOf(const v1::OptimizerSpec& optimizer) {
  absl::StatusOr<LearningRate> schedule = LearningRate::FromSpec(optimizer);
  if (!schedule.ok()) return [](int64_t) { return 0.0; };
  return [s = *std::move(schedule)](int64_t step) { return double{s(step - 1)}; };
}

TensorBoardWriter::TensorBoardWriter(std::string root, std::string job_id, std::string name,
                                     std::function<double(int64_t)> learning_rate,
                                     SerialExecutor* io)
    : root_(std::move(root)),
      job_id_(std::move(job_id)),
      name_(std::move(name)),
      learning_rate_(std::move(learning_rate)),
      io_(io) {}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::OnStep(const v1::StepEvent& s, int64_t unix_ms) {
  Queue(Scalars(s.step(), unix_ms,
                {{"train/loss", s.loss()},
                 {"train/accuracy", s.accuracy()},
                 {"train/learning_rate", learning_rate_(s.step())},
                 {"perf/samples_per_sec", s.samples_per_sec()},
                 {"time/compute_ms", s.compute_ms()},
                 {"time/allreduce_ms", s.allreduce_ms()},
                 {"time/update_ms", s.update_ms()},
                 {"time/worker_step_ms", s.worker_step_ms()},
                 {"time/wall_ms", s.wall_ms()}}));
}

void TensorBoardWriter::OnEval(const v1::EvalResult& e, int64_t unix_ms) {
  Queue(Scalars(e.step(), unix_ms,
                {{"eval/loss", e.test_loss()}, {"eval/accuracy", e.test_accuracy()}}));
}

std::string TensorBoardWriter::path() const {
  absl::MutexLock lock(&mu_);
  return path_;
}

void TensorBoardWriter::Queue(tensorboard::Event event) {
  {
    absl::MutexLock lock(&mu_);
    if (failed_) return;
    if (queued_.size() >= kMaxQueued) {
      failed_ = true;
      queued_.clear();
      LogJob(
          spdlog::level::err, {job_id_},
          absl::StrCat("TensorBoard: ", kMaxQueued, " events wait for the disk; writing no more"));
      return;
    }
    queued_.push_back(std::move(event));
    if (drain_posted_) return;
    drain_posted_ = true;
  }
  io_->Post([self = shared_from_this()] { self->Drain(); });
}

void TensorBoardWriter::Drain() {
  std::vector<tensorboard::Event> batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(queued_);
    drain_posted_ = false;
    if (failed_) return;
  }
  if (file_ == nullptr && !Open()) return;
  std::string out;
  for (const tensorboard::Event& e : batch) out += FrameTfRecord(e.SerializeAsString());
  if (std::fwrite(out.data(), 1, out.size(), file_) != out.size() || std::fflush(file_) != 0) {
    absl::MutexLock lock(&mu_);
    failed_ = true;
    queued_.clear();
    LogJob(spdlog::level::err, {job_id_},
           absl::StrCat("TensorBoard: cannot write ", path_, ": ", std::strerror(errno),
                        "; writing no more"));
  }
}

bool TensorBoardWriter::Open() {
  auto fail = [this](const std::string& why) {
    absl::MutexLock lock(&mu_);
    failed_ = true;
    queued_.clear();
    path_.clear();
    LogJob(spdlog::level::err, {job_id_},
           absl::StrCat("TensorBoard: ", why, "; writing no event files"));
    return false;
  };
  absl::StatusOr<std::string> dir = PrepareTensorBoardFolder(root_, job_id_, name_);
  if (!dir.ok()) return fail(std::string(dir.status().message()));
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  const std::string path = absl::StrCat(*dir, "/events.out.tfevents.", now, ".", HostName());
  file_ = std::fopen(path.c_str(), "ab");  // a name taken in the same second: appended to
  if (file_ == nullptr) return fail(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  {
    absl::MutexLock lock(&mu_);
    path_ = path;
  }
  tensorboard::Event version;
  version.set_wall_time(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  version.set_file_version("brain.Event:2");
  const std::string record = FrameTfRecord(version.SerializeAsString());
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    return fail(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return true;
}

}  // namespace lockstep
