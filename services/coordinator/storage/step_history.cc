// StepHistory: the per-step record a job keeps after it ends, for WatchJob and what reads it.
// Contract: step_history.h.
#include "services/coordinator/storage/step_history.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/io/safetensors.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

// What a file's metadata says it holds (so that no other safetensors file is taken for one).
constexpr char kKindKey[] = "lockstep.kind";
constexpr char kKind[] = "step_history";

}  // namespace

StepHistory::StepHistory(int64_t budget) : budget_(std::max<int64_t>(2, budget)) {}

void StepHistory::Add(const v1::JobEvent& event) {
  const v1::StepEvent& s = event.step();
  Keep({s.step(), s.epoch(), s.total_steps(), event.unix_ms(), s.loss(), s.accuracy(),
        static_cast<float>(s.samples_per_sec())});
}

void StepHistory::Keep(const Point& p) {
  // A replay: what was kept from this step on is run again.
  while (!points_.empty() && points_.back().step >= p.step) points_.pop_back();
  // The newest step is kept whatever the stride; once it is no longer the newest, only if
  // the stride keeps it.
  if (!points_.empty() && points_.back().step % stride_ != 0) points_.pop_back();
  points_.push_back(p);
  Thin();
}

void StepHistory::Thin() {
  while (static_cast<int64_t>(points_.size()) > budget_) {
    stride_ *= 2;
    const Point newest = points_.back();
    std::erase_if(points_, [this](const Point& p) { return p.step % stride_ != 0; });
    if (points_.empty() || points_.back().step != newest.step) points_.push_back(newest);
  }
}

std::vector<v1::JobEvent> StepHistory::Events() const {
  std::vector<v1::JobEvent> out;
  out.reserve(points_.size());
  for (const Point& p : points_) {
    v1::JobEvent e;
    v1::StepEvent& s = *e.mutable_step();
    s.set_step(p.step);
    s.set_epoch(p.epoch);
    s.set_total_steps(p.total_steps);
    s.set_loss(p.loss);
    s.set_accuracy(p.accuracy);
    s.set_samples_per_sec(p.samples_per_sec);
    e.set_unix_ms(p.unix_ms);
    out.push_back(std::move(e));
  }
  return out;
}

absl::Status StepHistory::Write(const std::string& path) const {
  const int64_t n = static_cast<int64_t>(points_.size());
  std::vector<int64_t> step, epoch, total, ms;
  std::vector<float> loss, accuracy, rate;
  for (const Point& p : points_) {
    step.push_back(p.step);
    epoch.push_back(p.epoch);
    total.push_back(p.total_steps);
    ms.push_back(p.unix_ms);
    loss.push_back(p.loss);
    accuracy.push_back(p.accuracy);
    rate.push_back(p.samples_per_sec);
  }
  SafeTensors file;
  const auto add_i64 = [&](const char* name, const std::vector<int64_t>& v) {
    file.Add(name, "I64", {n}, v.data(), v.size() * sizeof(int64_t));
  };
  add_i64("step", step);
  add_i64("epoch", epoch);
  add_i64("total_steps", total);
  add_i64("unix_ms", ms);
  file.AddF32("loss", {n}, loss);
  file.AddF32("accuracy", {n}, accuracy);
  file.AddF32("samples_per_sec", {n}, rate);
  file.metadata()[kKindKey] = kKind;
  file.metadata()["lockstep.stride"] = absl::StrCat(stride_);
  return file.Write(path);
}

absl::StatusOr<StepHistory> StepHistory::Read(const std::string& path, int64_t budget) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return absl::NotFoundError(path + ": no step history");
  ASSIGN_OR_RETURN(const SafeTensors file, SafeTensors::Read(path));
  const auto kind = file.metadata().find(kKindKey);
  if (kind == file.metadata().end() || kind->second != kKind) {
    return absl::InvalidArgumentError(path + ": not a step history");
  }
  ASSIGN_OR_RETURN(const std::vector<int64_t> step, file.I64("step"));
  ASSIGN_OR_RETURN(const std::vector<int64_t> epoch, file.I64("epoch"));
  ASSIGN_OR_RETURN(const std::vector<int64_t> total, file.I64("total_steps"));
  ASSIGN_OR_RETURN(const std::vector<int64_t> ms, file.I64("unix_ms"));
  ASSIGN_OR_RETURN(const std::vector<float> loss, file.F32("loss"));
  ASSIGN_OR_RETURN(const std::vector<float> accuracy, file.F32("accuracy"));
  ASSIGN_OR_RETURN(const std::vector<float> rate, file.F32("samples_per_sec"));
  const size_t n = step.size();
  for (size_t size :
       {epoch.size(), total.size(), ms.size(), loss.size(), accuracy.size(), rate.size()}) {
    if (size != n) return absl::InvalidArgumentError(path + ": columns of unequal length");
  }
  int64_t stride = 1;
  if (auto it = file.metadata().find("lockstep.stride");
      it == file.metadata().end() || !absl::SimpleAtoi(it->second, &stride) || stride < 1) {
    return absl::InvalidArgumentError(path + ": no lockstep.stride");
  }
  StepHistory h(budget);
  h.stride_ = stride;  // the thinning goes on where it was
  for (size_t i = 0; i < n; ++i) {
    h.Keep({step[i], epoch[i], total[i], ms[i], loss[i], accuracy[i], rate[i]});
  }
  return h;
}

}  // namespace lockstep
