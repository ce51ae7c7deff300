// StepFanout: the coordinator's end of one job's step streams, one per worker. Contract:
// step_fanout.h.
#include "services/coordinator/jobs/step_fanout.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// How long the streams may take to report their end once cancelled or closed (gRPC's
// OnDone, a reader's last Receive): normally at once.
constexpr absl::Duration kJoinTimeout = absl::Seconds(10);

}  // namespace

absl::StatusOr<std::unique_ptr<StepFanout>> StepFanout::Open(
    const std::vector<std::unique_ptr<WorkerClient>>& clients, const std::string& job_id,
    const CancelToken& cancel, absl::Duration lifetime, Blame blame) {
  std::vector<std::unique_ptr<StepStream>> streams;
  for (size_t r = 0; r < clients.size(); ++r) {
    auto s = clients[r]->OpenSteps(job_id, cancel, lifetime);
    if (!s.ok()) {
      for (auto& open : streams) open->Cancel();
      return blame(static_cast<int>(r), s.status());
    }
    streams.push_back(std::move(s).value());
  }
  return std::unique_ptr<StepFanout>(
      new StepFanout(std::move(streams), lifetime, std::move(blame)));
}

StepFanout::StepFanout(std::vector<std::unique_ptr<StepStream>> streams, absl::Duration lifetime,
                       Blame blame)
    : streams_(std::move(streams)), lifetime_(lifetime), blame_(std::move(blame)) {
  {
    absl::MutexLock lock(&mu_);
    answers_.resize(streams_.size());
    ended_.assign(streams_.size(), absl::OkStatus());
  }
  for (int r = 0; r < size(); ++r) {
    auto deliver = [this, r](absl::StatusOr<StepResult> answer) { Hand(r, std::move(answer)); };
    if (!streams_[r]->Subscribe(deliver)) readers_.emplace_back([this, r] { Read(r); });
  }
}

StepFanout::~StepFanout() {
  Cancel();
  Join();
  streams_.clear();  // before mu_ and the answers: a stream gone delivers nothing
}

void StepFanout::Read(int rank) {
  while (true) {
    absl::StatusOr<StepResult> answer = streams_[rank]->Receive(lifetime_);
    const bool more = answer.ok();
    Hand(rank, std::move(answer));
    if (!more) return;
  }
}

bool StepFanout::Settled(int rank) const { return !answers_[rank].empty() || !ended_[rank].ok(); }

void StepFanout::Hand(int rank, absl::StatusOr<StepResult> answer) {
  absl::MutexLock lock(&mu_);
  const bool settled = Settled(rank);
  if (answer.ok()) {
    answers_[rank].push_back(std::move(answer).value());
  } else {
    ended_[rank] = answer.status();
    if (!absl::IsOutOfRange(answer.status()) && first_error_ < 0) first_error_ = rank;
    if (answers_[rank].empty()) ++ended_early_;
  }
  settled_ += Settled(rank) - settled;
}

void StepFanout::Send(const std::vector<StepCommand>& commands) {
  for (int r = 0; r < size(); ++r) streams_[r]->Send(commands[r]);
}

absl::StatusOr<std::vector<StepResult>> StepFanout::Take(int64_t step, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  // Counted as answers arrive, so that waking the waiter costs O(1), not a scan of N.
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return first_error_ >= 0 || ended_early_ > 0 || settled_ == size();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
    std::vector<int> late;
    for (int r = 0; r < size(); ++r) {
      if (answers_[r].empty()) late.push_back(r);
    }
    std::string others;
    if (late.size() > 1) others = absl::StrCat(" (nor did ", late.size() - 1, " other worker(s))");
    return blame_(late[0],
                  absl::DeadlineExceededError(absl::StrCat("did not answer step ", step, " within ",
                                                           absl::FormatDuration(timeout), others)));
  }
  if (first_error_ >= 0) return blame_(first_error_, ended_[first_error_]);
  for (int r = 0; r < size(); ++r) {
    if (answers_[r].empty() && !ended_[r].ok()) {
      return blame_(r, absl::UnavailableError("ended its step stream early"));
    }
  }
  std::vector<StepResult> got(size());
  for (int r = 0; r < size(); ++r) {
    got[r] = std::move(answers_[r].front());
    answers_[r].pop_front();
    if (answers_[r].empty()) {
      if (ended_[r].ok())
        --settled_;
      else
        ++ended_early_;
    }
    if (got[r].step != step) {
      return blame_(r, absl::InternalError(absl::StrCat("answered step ", got[r].step,
                                                        " when step ", step, " was due")));
    }
  }
  return got;
}

absl::StatusOr<std::vector<StepResult>> StepFanout::TakeAnswered(int64_t step) {
  absl::MutexLock lock(&mu_);
  for (int r = 0; r < size(); ++r) {
    if (answers_[r].empty() || answers_[r].front().step != step) {
      return absl::NotFoundError(absl::StrCat("not every worker answered step ", step));
    }
  }
  std::vector<StepResult> got(size());
  for (int r = 0; r < size(); ++r) {
    got[r] = std::move(answers_[r].front());
    answers_[r].pop_front();
  }
  return got;
}

bool StepFanout::AllEnded() const {
  for (const absl::Status& st : ended_) {
    if (st.ok()) return false;
  }
  return true;
}

absl::Status StepFanout::Close(absl::Duration timeout) {
  for (auto& s : streams_) s->CloseSend();
  absl::Status st;
  {
    absl::MutexLock lock(&mu_);
    auto ended = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return AllEnded(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ended), timeout)) {
      for (int r = 0; r < size(); ++r) {
        if (ended_[r].ok()) {
          st =
              blame_(r, absl::DeadlineExceededError(absl::StrCat(
                            "did not end its step stream within ", absl::FormatDuration(timeout))));
          break;
        }
      }
    }
  }
  if (!st.ok()) Cancel();
  Join();
  return st;
}

std::vector<absl::Status> StepFanout::Errors() {
  absl::MutexLock lock(&mu_);
  std::vector<absl::Status> out;
  for (const absl::Status& st : ended_) {
    out.push_back(absl::IsOutOfRange(st) ? absl::OkStatus() : st);
  }
  return out;
}

void StepFanout::Cancel() {
  for (auto& s : streams_) s->Cancel();
}

void StepFanout::Join() {
  for (auto& t : readers_) {
    if (t.joinable()) t.join();
  }
  // The subscribed streams hand over their end on their own threads: wait for it, so that
  // none reaches this fanout after it is gone.
  absl::MutexLock lock(&mu_);
  auto ended = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return AllEnded(); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ended), kJoinTimeout)) {
    spdlog::error("{} step stream(s) did not report their end within {} of a cancel",
                  std::count_if(ended_.begin(), ended_.end(), [](const auto& s) { return s.ok(); }),
                  absl::FormatDuration(kJoinTimeout));
  }
}

}  // namespace lockstep
