// TensorBoardWriter: one job's TensorBoard event file, written as its steps and evaluations come.
// Contract: tensorboard_writer.h.
#include "services/coordinator/observability/tensorboard_writer.h"

#include <unistd.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/io/paths.h"
#include "core/io/tfrecord.h"
#include "core/learning_rate.h"
#include "core/optimizer_spec.h"
#include "services/common/observability/job_log.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

// Events queued and not yet taken by the io thread, past which new ones are dropped (a
// stuck disk), and the bytes of records a full disk refused, past which new batches are.
constexpr size_t kMaxQueued = 100000;
constexpr size_t kMaxPendingBytes = size_t{64} << 20;

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
  absl::StatusOr<LearningRate> schedule = LearningRateFromSpec(optimizer);
  if (!schedule.ok()) return [](int64_t) { return 0.0; };
  return [s = *std::move(schedule)](int64_t step) { return double{s(step - 1)}; };
}

TensorBoardWriter::TensorBoardWriter(std::string root, std::string job_id, std::string name,
                                     std::function<double(int64_t)> learning_rate,
                                     SerialExecutor* io, AppendFileOpener open)
    : root_(std::move(root)),
      job_id_(std::move(job_id)),
      name_(std::move(name)),
      learning_rate_(std::move(learning_rate)),
      io_(io),
      open_(std::move(open)) {}

TensorBoardWriter::~TensorBoardWriter() = default;

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
      // A stuck disk: drop until the queue drains, then write again.
      if (!over_cap_) {
        LogJob(spdlog::level::err, {job_id_},
               absl::StrCat("TensorBoard: ", kMaxQueued,
                            " events wait for the disk; dropping new ones until they are written"));
      }
      over_cap_ = true;
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
    over_cap_ = false;
    if (failed_) return;
  }
  if (pending_.size() < kMaxPendingBytes) {
    for (const tensorboard::Event& e : batch) pending_ += FrameTfRecord(e.SerializeAsString());
  } else {
    dropped_ += static_cast<int64_t>(batch.size());
  }
  if (file_ == nullptr && !Open()) return;  // kept for the next try
  const absl::Status st = file_->Append(pending_);
  if (!st.ok()) return Failed(std::string(st.message()), false);
  pending_.clear();
  if (failed_writes_ > 0) {
    LogJob(spdlog::level::info, {job_id_},
           absl::StrCat("TensorBoard: writing again after ", failed_writes_, " failed writes",
                        dropped_ > 0 ? absl::StrCat(" (", dropped_, " events dropped)") : ""));
  }
  failed_writes_ = 0;
  dropped_ = 0;
}

void TensorBoardWriter::Failed(const std::string& why, bool permanent) {
  if (permanent) {
    absl::MutexLock lock(&mu_);
    failed_ = true;
    queued_.clear();
    path_.clear();
  }
  if (permanent || failed_writes_++ == 0) {
    LogJob(spdlog::level::err, {job_id_},
           absl::StrCat("TensorBoard: ", why,
                        permanent ? "; writing no event files"
                                  : "; keeping the events to write with the next ones"));
  }
}

bool TensorBoardWriter::Open() {
  absl::StatusOr<std::string> dir = PrepareTensorBoardFolder(root_, job_id_, name_);
  if (!dir.ok()) {
    Failed(std::string(dir.status().message()), absl::IsInvalidArgument(dir.status()));
    return false;
  }
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  const std::string path = absl::StrCat(*dir, "/events.out.tfevents.", now, ".", HostName());
  // A name taken in the same second: appended to.
  absl::StatusOr<std::unique_ptr<AppendFile>> file = open_(path);
  if (!file.ok()) {
    Failed(std::string(file.status().message()), false);
    return false;
  }
  file_ = std::move(file).value();
  {
    absl::MutexLock lock(&mu_);
    path_ = path;
  }
  tensorboard::Event version;
  version.set_wall_time(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  version.set_file_version("brain.Event:2");
  pending_.insert(0, FrameTfRecord(version.SerializeAsString()));
  return true;
}

}  // namespace lockstep
