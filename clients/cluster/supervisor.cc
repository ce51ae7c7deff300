// Supervisor: restarts the servers of a local cluster that exit, with exponential backoff, so that
// one crashed worker or coordinator does not end the cluster. Contract: supervisor.h.
#include "clients/cluster/supervisor.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lockstep {

absl::Duration RestartBackoff::NextDelay(absl::Duration uptime) {
  if (uptime >= options_.reset_after) next_ = options_.initial;
  const absl::Duration delay = next_;
  next_ = std::min(next_ * 2, options_.max);
  return delay;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrFormat("killed by signal %d (%s)", WTERMSIG(status),
                           strsignal(WTERMSIG(status)));
  }
  return absl::StrCat("ended with wait status ", status);
}

Supervisor::Supervisor(SupervisedServers* servers, absl::Time now, BackoffOptions options,
                       std::function<void(const std::string&)> log, RestartPolicy policy)
    : servers_(servers), options_(options), log_(std::move(log)), policy_(policy) {
  slots_.assign(servers_->ServerCount(), Slot{RestartBackoff(options), now, std::nullopt});
}

void Supervisor::Schedule(int i, absl::Time now, absl::Duration uptime, const std::string& why) {
  Slot& s = slots_[i];
  const absl::Duration delay = s.backoff.NextDelay(uptime);
  s.restart_at = now + delay;
  log_(absl::StrCat(why, "; restarting it in ", absl::FormatDuration(delay), " at ",
                    absl::FormatTime("%H:%M:%S", *s.restart_at, absl::LocalTimeZone())));
}

bool Supervisor::Poll(absl::Time now) {
  // Servers added since (AddWorker) are watched from their first poll on.
  while (static_cast<int>(slots_.size()) < servers_->ServerCount()) {
    slots_.push_back(Slot{RestartBackoff(options_), now, std::nullopt});
  }
  bool changed = false;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    Slot& s = slots_[i];
    if (!s.restart_at) {
      const std::optional<int> status = servers_->Reap(i);
      if (!status) continue;
      const absl::Duration uptime = now - s.started;
      const std::string why =
          absl::StrFormat("%s %s after %.1fs up", servers_->ServerName(i),
                          DescribeWaitStatus(*status), absl::ToDoubleSeconds(uptime));
      if (policy_ == RestartPolicy::kNever) {
        log_(absl::StrCat(why, "; not restarted (--restart never)"));
        changed = true;  // reaped for good
        continue;
      }
      Schedule(i, now, uptime, why);
      continue;
    }
    if (now < *s.restart_at) continue;
    s.restart_at.reset();
    s.started = now;
    if (absl::Status st = servers_->Respawn(i); !st.ok()) {
      // A failed start counts as a crash at once: it backs off like one.
      Schedule(i, now, absl::ZeroDuration(),
               absl::StrCat(servers_->ServerName(i), " did not start: ", st.ToString()));
      continue;
    }
    changed = true;
  }
  return changed;
}

std::optional<absl::Time> Supervisor::NextRestart() const {
  std::optional<absl::Time> next;
  for (const Slot& s : slots_) {
    if (s.restart_at && (!next || *s.restart_at < *next)) next = s.restart_at;
  }
  return next;
}

}  // namespace lockstep
