// Per-user limits: how many jobs one owner may have queued and running, how fast they may submit,
// and how many of their finished jobs' records are kept. Contract: user_limits.h.
#include "services/coordinator/scheduling/user_limits.h"

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// The flag of each limit's default, and its key in the tokens file.
const char* FlagOf(UserLimit which) {
  switch (which) {
    case UserLimit::kQueued:
      return "max_queued_jobs_per_user";
    case UserLimit::kRunning:
      return "max_running_jobs_per_user";
    case UserLimit::kSubmitsPerMinute:
      return "submits_per_minute_per_user";
    case UserLimit::kKept:
      return "max_jobs_kept_per_user";
  }
  return "";
}

const char* KeyOf(UserLimit which) {
  switch (which) {
    case UserLimit::kQueued:
      return "max_queued_jobs";
    case UserLimit::kRunning:
      return "max_running_jobs";
    case UserLimit::kSubmitsPerMinute:
      return "submits_per_minute";
    case UserLimit::kKept:
      return "max_jobs_kept";
  }
  return "";
}

int ValueOf(const UserLimits& limits, UserLimit which) {
  switch (which) {
    case UserLimit::kQueued:
      return limits.max_queued_jobs;
    case UserLimit::kRunning:
      return limits.max_running_jobs;
    case UserLimit::kSubmitsPerMinute:
      return limits.submits_per_minute;
    case UserLimit::kKept:
      return limits.max_jobs_kept;
  }
  return 0;
}

void Set(const std::optional<int64_t>& own, UserLimit which, int* value, unsigned* from) {
  if (!own.has_value()) return;
  *value = static_cast<int>(*own);
  *from |= 1u << static_cast<int>(which);
}

void Override(const CallerLimits& own, UserLimits* l) {
  Set(own.max_queued_jobs, UserLimit::kQueued, &l->max_queued_jobs, &l->from_tokens_file);
  Set(own.max_running_jobs, UserLimit::kRunning, &l->max_running_jobs, &l->from_tokens_file);
  Set(own.submits_per_minute, UserLimit::kSubmitsPerMinute, &l->submits_per_minute,
      &l->from_tokens_file);
  Set(own.max_jobs_kept, UserLimit::kKept, &l->max_jobs_kept, &l->from_tokens_file);
}

}  // namespace

UserLimitsTable::UserLimitsTable(const UserLimits& defaults,
                                 const std::map<std::string, Caller>& callers)
    : defaults_(defaults) {
  for (const auto& [name, caller] : callers) {
    if (!caller.admin && !caller.limits.any()) continue;  // a user with the defaults
    Named& n = by_name_[name];
    n.admin = caller.admin;
    n.limits = defaults;
    if (caller.limits.any()) {
      Override(caller.limits, &n.limits);
    } else {  // an administrator is exempt from all but retention
      n.limits.max_queued_jobs = n.limits.max_running_jobs = n.limits.submits_per_minute = 0;
    }
  }
}

const UserLimits& UserLimitsTable::For(const std::string& owner) const {
  auto it = by_name_.find(owner);
  return it == by_name_.end() ? defaults_ : it->second.limits;
}

absl::Status UserLimitsTable::Check(int max_queued_jobs, int max_jobs_kept) const {
  auto check = [&](const std::string& who, const UserLimits& l, bool admin) -> absl::Status {
    const int queued = l.max_queued_jobs;
    if ((!admin && queued == 0) || queued >= max_queued_jobs) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, LimitSource(l, UserLimit::kQueued), " must be between 1 and --max_queued_jobs ",
          max_queued_jobs, " less 1: one user could fill the coordinator's queue"));
    }
    const int64_t records =
        static_cast<int64_t>(l.max_jobs_kept) + (queued > 0 ? queued : max_queued_jobs);
    if (records >= max_jobs_kept) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, LimitSource(l, UserLimit::kKept), " plus ",
                       queued > 0 ? "the queued limit " : "--max_queued_jobs ",
                       queued > 0 ? queued : max_queued_jobs, " must be below --max_jobs_kept ",
                       max_jobs_kept, ": one user could fill the coordinator's job records"));
    }
    return absl::OkStatus();
  };
  if (absl::Status st = check("", defaults_, false); !st.ok()) return st;
  for (const auto& [name, n] : by_name_) {
    if (absl::Status st =
            check(absl::StrCat(n.admin ? "admin " : "user ", name, ": "), n.limits, n.admin);
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

std::string LimitSource(const UserLimits& limits, UserLimit which) {
  const int value = ValueOf(limits, which);
  const bool own = (limits.from_tokens_file >> static_cast<int>(which)) & 1u;
  return own ? absl::StrCat(KeyOf(which), "=", value, " in the tokens file")
             : absl::StrCat("--", FlagOf(which), " ", value);
}

std::string OverLimit(const std::string& owner, const UserLimits& limits, UserLimit which,
                      int count) {
  const char* what = which == UserLimit::kQueued             ? " queued jobs"
                     : which == UserLimit::kRunning          ? " running jobs"
                     : which == UserLimit::kSubmitsPerMinute ? " submits in the last minute"
                                                             : " finished jobs kept";
  return absl::StrCat("user ", owner, ": ", count, what, " (limit ", LimitSource(limits, which),
                      ")");
}

}  // namespace lockstep
