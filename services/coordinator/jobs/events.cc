// JobEvents (events.h): the pushed events kept until the job's thread takes them, and the
// interrupts that cannot wait for it.
#include "services/coordinator/jobs/events.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {

JobEvents::JobEvents() : attempt_(std::make_shared<CancelToken>()) {
  cancel_attempt_ = job_.OnCancel([this] {
    std::shared_ptr<CancelToken> attempt;
    {
      absl::MutexLock lock(&mu_);  // wakes AwaitWorkers
      cancelled_ = true;
      attempt = attempt_;
    }
    attempt->Cancel(job_.status());
  });
}

JobEvents::~JobEvents() = default;

void JobEvents::Cancel(absl::Status why) { job_.Cancel(std::move(why)); }

void JobEvents::Drain(std::string why) {
  bool now;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    drain_why_ = std::move(why);
    now = !stepping_;
  }
  // Preparing, or between attempts: nothing to finish first.
  if (now) job_.Cancel(Drained("its latest snapshot"));
}

void JobEvents::LoseWorker(const std::string& worker_id, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (std::find(members_.begin(), members_.end(), worker_id) != members_.end()) {
    attempt_->Cancel(why);
  }
}

void JobEvents::Release(std::vector<std::string> ids, std::string why) {
  absl::MutexLock lock(&mu_);
  for (std::string& id : ids) releasing_[std::move(id)] = why;
}

void JobEvents::GiveWorkers(std::vector<PoolWorker> workers) {
  absl::MutexLock lock(&mu_);
  given_ = std::move(workers);
}

void JobEvents::NoWorkers(absl::Status why) {
  absl::MutexLock lock(&mu_);
  given_ = std::move(why);
}

void JobEvents::Offer(std::vector<PoolWorker> workers) {
  absl::MutexLock lock(&mu_);
  for (PoolWorker& w : workers) offered_.push_back(std::move(w));
}

absl::StatusOr<std::vector<PoolWorker>> JobEvents::AwaitWorkers(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto answered = [this]()
                      ABSL_SHARED_LOCKS_REQUIRED(mu_) { return given_.has_value() || cancelled_; };
  const bool woke = mu_.AwaitWithTimeout(absl::Condition(&answered), timeout);
  if (cancelled_) return job_.status();
  if (!woke) {
    return absl::DeadlineExceededError(
        absl::StrCat("the coordinator gave neither workers nor a reason within ",
                     absl::FormatDuration(timeout)));
  }
  absl::StatusOr<std::vector<PoolWorker>> out = *std::move(given_);
  given_.reset();
  return out;
}

std::vector<PoolWorker> JobEvents::TakeOffer() {
  absl::MutexLock lock(&mu_);
  return std::exchange(offered_, {});
}

void JobEvents::DropOffers() {
  absl::MutexLock lock(&mu_);
  offered_.clear();
}

std::shared_ptr<CancelToken> JobEvents::NewAttempt(const std::vector<PoolWorker>& workers) {
  std::shared_ptr<CancelToken> token = std::make_shared<CancelToken>();
  {
    absl::MutexLock lock(&mu_);
    attempt_ = token;
    members_.clear();
    for (const PoolWorker& w : workers) members_.push_back(w.id);
  }
  if (!job_.status().ok()) token->Cancel(job_.status());  // raced with a Cancel
  return token;
}

std::shared_ptr<CancelToken> JobEvents::attempt() {
  absl::MutexLock lock(&mu_);
  return attempt_;
}

bool JobEvents::draining() {
  absl::MutexLock lock(&mu_);
  return draining_;
}

bool JobEvents::suspending() {
  absl::MutexLock lock(&mu_);
  return draining_ && !drain_why_.empty();
}

absl::Status JobEvents::Drained(absl::string_view from) {
  std::string why;
  {
    absl::MutexLock lock(&mu_);
    why = drain_why_;
  }
  if (!why.empty()) {
    return absl::UnavailableError(
        absl::StrCat(why, ": the job continues from ", from, " when workers are free"));
  }
  return absl::UnavailableError(absl::StrCat(
      "the coordinator is stopping (drain): the job continues from ", from, " once it is back"));
}

absl::Status JobEvents::SetStepping(bool stepping) {
  bool drained;
  {
    absl::MutexLock lock(&mu_);
    stepping_ = stepping;
    drained = stepping && draining_;
  }
  return drained ? Drained("its latest snapshot") : absl::OkStatus();
}

std::pair<std::vector<std::string>, std::string> JobEvents::Releasing(
    const std::vector<PoolWorker>& workers) {
  std::vector<std::string> ids;
  // The workers named for each reason, in the order the reasons first come in rank order.
  std::vector<std::pair<std::string, std::vector<std::string>>> by_why;
  {
    absl::MutexLock lock(&mu_);
    for (const PoolWorker& w : workers) {
      auto it = releasing_.find(w.id);
      if (it == releasing_.end()) continue;
      ids.push_back(w.id);
      auto same = std::find_if(by_why.begin(), by_why.end(),
                               [&](const auto& group) { return group.first == it->second; });
      if (same == by_why.end()) {
        same = by_why.emplace(by_why.end(), it->second, std::vector<std::string>());
      }
      same->second.push_back(w.id);
    }
  }
  std::vector<std::string> parts;
  for (const auto& [why, named] : by_why) {
    parts.push_back(absl::StrCat("worker", named.size() > 1 ? "s " : " ",
                                 absl::StrJoin(named, ", "), " ", why));
  }
  return {std::move(ids), absl::StrJoin(parts, "; ")};
}

void JobEvents::Released(const std::vector<std::string>& ids) {
  absl::MutexLock lock(&mu_);
  for (const std::string& id : ids) releasing_.erase(id);
}

}  // namespace lockstep
