// Retrying a collective's bootstrap in place. Contract: bootstrap_retry.h.
#include "workers/gloo/bootstrap_retry.h"

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace lockstep::gloo_internal {
namespace {

constexpr char kDone[] = "done";

absl::Duration Left(absl::Time deadline) {
  return std::max(absl::ZeroDuration(), deadline - absl::Now());
}

// A verdict as stored: "ok", "retry\nMESSAGE" or "fatal\nCODE\nMESSAGE".
std::string EncodeVerdict(const absl::Status& status) {
  if (status.ok()) return "ok";
  if (IsRetriable(status)) return absl::StrCat("retry\n", status.message());
  return absl::StrCat("fatal\n", static_cast<int>(status.code()), "\n", status.message());
}

absl::Status DecodeVerdict(int rank, const std::string& verdict) {
  if (verdict == "ok") return absl::OkStatus();
  std::vector<std::string> parts = absl::StrSplit(verdict, absl::MaxSplits('\n', 2));
  const std::string who = absl::StrCat("rank ", rank, ": ");
  int code = 0;
  if (parts.size() == 2 && parts[0] == "retry") return absl::UnavailableError(who + parts[1]);
  if (parts.size() == 3 && parts[0] == "fatal" && absl::SimpleAtoi(parts[1], &code) && code > 0 &&
      code <= static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::Status(static_cast<absl::StatusCode>(code), who + parts[2]);
  }
  return absl::InternalError(absl::StrCat(who, "unreadable bootstrap verdict"));
}

// The worse of two outcomes: an error over OK, a non-retriable error over a retriable one.
void Merge(absl::Status* agreed, absl::Status other) {
  if (other.ok()) return;
  if (agreed->ok() || (IsRetriable(*agreed) && !IsRetriable(other))) *agreed = std::move(other);
}

struct AttemptOutcome {
  absl::Status own;     // this rank's
  absl::Status agreed;  // every rank's verdict merged: OK only if all joined
  absl::Status ended;   // not OK: the bootstrap cannot go on (a verdict missing, the store)
};

// Runs one attempt on this rank and agrees on its outcome with the others.
AttemptOutcome RunAttempt(Store* store, const BootstrapRetryOptions& options, int k,
                          const std::string& prefix, BootstrapAttempt* attempt, absl::Status own) {
  const std::string failed_key = absl::StrCat(prefix, "/failed");
  // Aborts this rank's attempt as soon as any rank reports a failure, or the store fails
  // (the job cancelled, the coordinator gone: the ranks could not agree anyway).
  std::thread watcher([&] {
    absl::StatusOr<std::string> failed = store->Get(failed_key, Left(options.deadline));
    if (attempt == nullptr || (failed.ok() && *failed == kDone)) return;
    if (absl::IsDeadlineExceeded(failed.status())) return;  // the attempt's own deadline too
    attempt->Abort(absl::AbortedError(
        failed.ok() ? absl::StrCat("bootstrap attempt ", k, " failed elsewhere: ", *failed)
                    : absl::StrCat("bootstrap attempt ", k, ": ", failed.status().ToString())));
  });
  if (own.ok()) own = attempt->Join();
  const std::string me = absl::StrCat("rank ", options.rank, ": ");
  if (!own.ok()) store->Set(failed_key, me + std::string(own.message())).IgnoreError();

  AttemptOutcome out;
  out.own = own;
  out.agreed = own;
  out.ended = store->Set(absl::StrCat(prefix, "/verdict/", options.rank), EncodeVerdict(own));
  for (int q = 0; q < options.size && out.ended.ok(); ++q) {
    if (q == options.rank) continue;
    absl::StatusOr<std::string> verdict =
        store->Get(absl::StrCat(prefix, "/verdict/", q), Left(options.deadline));
    if (!verdict.ok()) {
      out.ended = absl::Status(verdict.status().code(),
                               absl::StrCat("bootstrap attempt ", k, ": waiting for rank ", q,
                                            "'s outcome: ", verdict.status().message()));
      break;
    }
    Merge(&out.agreed, DecodeVerdict(q, *verdict));
  }
  // Wakes the watchers: this rank's, and (when it gives up) everyone's.
  if (out.ended.ok() && out.agreed.ok()) {
    store->Set(failed_key, kDone).IgnoreError();
  } else if (!out.ended.ok()) {
    store->Set(failed_key, me + std::string(out.ended.message())).IgnoreError();
  }
  watcher.join();
  return out;
}

}  // namespace

bool IsRetriable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsAborted(status) || absl::IsDeadlineExceeded(status);
}

absl::StatusOr<Joined> JoinWithRetries(
    Store* store, const BootstrapRetryOptions& options,
    const std::function<absl::StatusOr<std::unique_ptr<BootstrapAttempt>>(
        int attempt, const std::string& prefix)>& make) {
  absl::Status last;
  int k = 0;
  for (; k < std::max(1, options.max_attempts); ++k) {
    if (k > 0 && absl::Now() >= options.deadline) break;
    const std::string prefix = absl::StrCat(options.prefix, "/", k);
    absl::StatusOr<std::unique_ptr<BootstrapAttempt>> attempt = make(k, prefix);
    AttemptOutcome out = RunAttempt(store, options, k, prefix,
                                    attempt.ok() ? attempt->get() : nullptr, attempt.status());
    if (!out.ended.ok()) {
      // This rank's own failure says more than a verdict that could not come after it;
      // but a cancelled job is CANCELLED.
      return out.own.ok() || absl::IsCancelled(out.ended) ? out.ended : out.own;
    }
    if (out.agreed.ok()) return Joined{*std::move(attempt), k + 1};
    if (!IsRetriable(out.agreed)) return out.agreed;
    last = out.agreed;
    if (k + 1 < options.max_attempts && absl::Now() < options.deadline && options.on_retry) {
      options.on_retry(k, last);
    }
  }
  const bool out_of_time = absl::Now() >= options.deadline;
  return absl::Status(
      out_of_time ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kUnavailable,
      absl::StrCat("bootstrap failed after ", k, k == 1 ? " attempt" : " attempts",
                   out_of_time ? " (out of time)" : "", "; the last: ", last.message()));
}

}  // namespace lockstep::gloo_internal
