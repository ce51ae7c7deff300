#include "services/coordinator/step_fanout.h"

#include "absl/strings/str_cat.h"

namespace lockstep {

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
  return std::unique_ptr<StepFanout>(new StepFanout(std::move(streams), std::move(blame)));
}

StepFanout::StepFanout(std::vector<std::unique_ptr<StepStream>> streams, Blame blame)
    : streams_(std::move(streams)), blame_(std::move(blame)) {
  {
    absl::MutexLock lock(&mu_);
    answers_.resize(streams_.size());
    ended_.assign(streams_.size(), absl::OkStatus());
  }
  for (int r = 0; r < size(); ++r) readers_.emplace_back([this, r] { Read(r); });
}

StepFanout::~StepFanout() {
  Cancel();
  Join();
}

void StepFanout::Read(int rank) {
  while (true) {
    auto answer = streams_[rank]->Receive();
    absl::MutexLock lock(&mu_);
    if (!answer.ok()) {
      ended_[rank] = answer.status();
      if (!absl::IsOutOfRange(answer.status()) && first_error_ < 0) first_error_ = rank;
      return;
    }
    answers_[rank].push_back(std::move(answer).value());
  }
}

void StepFanout::Send(const std::vector<StepCommand>& commands) {
  for (int r = 0; r < size(); ++r) streams_[r]->Send(commands[r]);
}

absl::StatusOr<std::vector<StepResult>> StepFanout::Take(int64_t step, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    if (first_error_ >= 0) return true;
    for (int r = 0; r < size(); ++r) {
      if (answers_[r].empty()) return !ended_[r].ok();  // waiting, or ended early
    }
    return true;
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
  std::vector<StepResult> got(size());
  for (int r = 0; r < size(); ++r) {
    if (answers_[r].empty())
      return blame_(r, absl::UnavailableError("ended its step stream early"));
    got[r] = std::move(answers_[r].front());
    answers_[r].pop_front();
    if (got[r].step != step) {
      return blame_(r, absl::InternalError(absl::StrCat("answered step ", got[r].step,
                                                        " when step ", step, " was due")));
    }
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

void StepFanout::Cancel() {
  for (auto& s : streams_) s->Cancel();
}

void StepFanout::Join() {
  for (auto& t : readers_) {
    if (t.joinable()) t.join();
  }
}

}  // namespace lockstep
