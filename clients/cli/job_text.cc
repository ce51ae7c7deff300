// The human form of a job, as `status`, `list` and `watch` print it: a headline (id, state, name,
// progress, loss, accuracy, workers, owner) and indented lines for what waits, recovers, failed or
// was written. Contract: job_text.h.
#include "clients/cli/job_text.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "clients/cli/terminal_text.h"

namespace lockstep::cli {

std::string Count(int64_t n, const std::string& noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

std::string Hex64(uint64_t value) { return absl::StrFormat("%016x", value); }

namespace {

std::string TimeText(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

// "1h02m", "3m05s", "42s".
std::string DurationText(int64_t ms) {
  const int64_t t = std::max<int64_t>(0, (ms + 500) / 1000);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  if (t >= 60) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  return absl::StrFormat("%ds", t);
}

std::string Label(const v1::Job& job) {
  const v1::JobSpec& spec = job.spec();
  return Printable(!spec.name().empty()           ? spec.name()
                   : !spec.model().kind().empty() ? spec.model().kind()
                                                  : std::string("layers"));
}

}  // namespace

std::string WorkersText(const v1::Job& job) {
  const v1::JobSpec& spec = job.spec();
  if (job.workers_size() > 0) return Count(job.workers_size(), "worker");
  if (spec.min_workers() > 0 && spec.min_workers() < spec.workers()) {
    return absl::StrCat(spec.min_workers(), "-", spec.workers(), " workers");
  }
  return Count(spec.workers(), "worker");
}

std::string JobText(const v1::Job& job) {
  std::string out = absl::StrCat(job.id(), "  ", v1::JobState_Name(job.state()), "  ", Label(job));
  if (job.total_steps() > 0)
    absl::StrAppendFormat(&out, "  step %d/%d", job.step(), job.total_steps());
  if (job.step() > 0) absl::StrAppendFormat(&out, "  loss %.4f", job.last_loss());
  if (job.has_last_eval()) {
    absl::StrAppendFormat(&out, "  test accuracy %.4f", job.last_eval().test_accuracy());
  }
  absl::StrAppend(&out, "  ", WorkersText(job));
  if (!job.owner().empty()) absl::StrAppend(&out, "  owner ", Printable(job.owner()));
  absl::StrAppend(&out, "\n");
  if ((job.state() == v1::QUEUED || job.state() == v1::RECOVERING ||
       job.state() == v1::SUSPENDED) &&
      !job.waiting_for().empty()) {
    absl::StrAppend(&out, "  waiting for ", Printable(job.waiting_for()), "\n");
  }
  if (job.recoveries() > 0 || job.snapshot_step() > 0) {
    absl::StrAppendFormat(&out, "  recoveries %d  last snapshot at step %d\n", job.recoveries(),
                          job.snapshot_step());
  }
  if (!job.failure_reason().empty()) {  // RECOVERING, SUSPENDED: why; FAILED: what went wrong
    absl::StrAppend(&out, "  ", Printable(job.failure_code()), ": ",
                    Printable(job.failure_reason()), "\n");
  }
  if (job.started_unix_ms() > 0 && job.finished_unix_ms() >= job.started_unix_ms()) {
    absl::StrAppend(&out, "  started ", TimeText(job.started_unix_ms()), "  ended ",
                    TimeText(job.finished_unix_ms()), "  took ",
                    DurationText(job.finished_unix_ms() - job.started_unix_ms()), "\n");
  }
  if (job.param_checksum() != 0) {
    absl::StrAppend(&out, "  params checksum ", Hex64(job.param_checksum()), "\n");
  }
  if (!job.checkpoint_path().empty())
    absl::StrAppend(&out, "  checkpoint ", Printable(job.checkpoint_path()), "\n");
  return out;
}

namespace {

std::string Age(int64_t ms) {
  const int64_t s = std::max<int64_t>(0, ms / 1000);
  if (s < 120) return absl::StrCat(s, "s");
  if (s < 2 * 3600) return absl::StrCat(s / 60, "m");
  if (s < 2 * 86400) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

// Rows as columns aligned with two spaces between them; each cell already Printable.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      absl::StrAppend(&line, row[c]);
      if (c + 1 < row.size()) line.append(width[c] - row[c].size() + 2, ' ');
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

}  // namespace

std::string JobTable(const std::vector<v1::Job>& jobs, int64_t now_unix_ms, bool wide) {
  std::vector<std::vector<std::string>> rows;
  if (wide) {
    rows.push_back({"ID", "STATE", "NAME", "STEP", "LOSS", "TEST-ACC", "SAMPLES/S", "WORKERS",
                    "OWNER", "AGE", "REASON"});
  } else {
    rows.push_back({"ID", "STATE", "NAME", "STEP", "LOSS", "TEST-ACC", "WORKERS", "AGE"});
  }
  for (const v1::Job& job : jobs) {
    const v1::JobSpec& spec = job.spec();
    const std::string step =
        job.total_steps() > 0 ? absl::StrCat(job.step(), "/", job.total_steps()) : "-";
    const std::string loss = job.step() > 0 ? absl::StrFormat("%.4f", job.last_loss()) : "-";
    const std::string accuracy =
        job.has_last_eval() ? absl::StrFormat("%.4f", job.last_eval().test_accuracy()) : "-";
    const std::string age = Age(now_unix_ms - job.created_unix_ms());
    if (!wide) {
      rows.push_back({job.id(), v1::JobState_Name(job.state()), Label(job), step, loss, accuracy,
                      WorkersText(job), age});
      continue;
    }
    const std::string reason =
        !job.waiting_for().empty() ? "waiting for " + job.waiting_for() : job.failure_reason();
    rows.push_back(
        {job.id(), v1::JobState_Name(job.state()),
         Printable(!spec.name().empty() ? spec.name() : spec.model().kind()), step, loss, accuracy,
         job.samples_per_sec() > 0 ? absl::StrFormat("%.0f", job.samples_per_sec()) : "-",
         job.workers().empty() ? absl::StrCat(spec.workers())
                               : Printable(absl::StrJoin(job.workers(), ",")),
         job.owner().empty() ? "-" : Printable(job.owner()), age,
         reason.empty() ? "-" : Printable(reason)});
  }
  return Table(rows);
}

std::string WorkersTable(const std::vector<v1::WorkerInfo>& workers) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAME", "ADDRESS", "DEVICE", "THREADS", "STATUS"}};
  for (const v1::WorkerInfo& w : workers) {
    const std::string status =
        !w.quarantined().empty() ? "quarantined: " + w.quarantined()
        : w.leaving() ? (w.job_id().empty() ? std::string("leaving") : "leaving " + w.job_id())
        : w.job_id().empty() ? std::string("free")
                             : "running " + w.job_id();
    rows.push_back({Printable(w.id()), Printable(w.name().empty() ? "-" : w.name()),
                    Printable(w.address()), Printable(w.device()), absl::StrCat(w.threads()),
                    Printable(status)});
  }
  return Table(rows);
}

std::string EventText(const v1::JobEvent& e) {
  std::string what;
  if (e.has_step()) {
    const v1::StepEvent& s = e.step();
    what = absl::StrFormat("step %d/%d  loss %.4f  accuracy %.4f  %.0f samples/s", s.step(),
                           s.total_steps(), s.loss(), s.accuracy(), s.samples_per_sec());
  } else if (e.has_eval()) {
    what = absl::StrFormat("eval at step %d  loss %.4f  accuracy %.4f", e.eval().step(),
                           e.eval().test_loss(), e.eval().test_accuracy());
  } else if (e.has_state()) {
    what = absl::StrCat("state ", v1::JobState_Name(e.state().state()),
                        e.state().reason().empty() ? "" : ": ", Printable(e.state().reason()));
  } else if (e.has_log()) {
    const v1::LogLine& l = e.log();
    what = absl::StrCat(Printable(l.level()), "  ", Printable(l.source()));
    if (!l.worker().empty() && l.worker() != l.source()) {
      absl::StrAppend(&what, " ", Printable(l.worker()));
    }
    if (l.has_rank()) absl::StrAppend(&what, " rank ", l.rank());
    absl::StrAppend(&what, ": ", Printable(l.message()));
  }
  return absl::StrCat(TimeText(e.unix_ms()), "  ", what);
}

absl::Status CheckCanFit(const v1::JobSpec& spec, const std::vector<v1::WorkerInfo>& workers) {
  // An elastic job (workers: {min, max}) starts on as few as its min.
  const int64_t want =
      std::max<int64_t>(1, spec.min_workers() > 0 ? spec.min_workers() : spec.workers());
  const std::string device = spec.device().empty() ? "cpu" : spec.device();
  int64_t suit = 0;
  for (const v1::WorkerInfo& w : workers) {
    const bool same =
        device == "cuda" ? absl::StartsWith(w.device(), "cuda") : w.device() == device;
    if (same && w.quarantined().empty() && !w.leaving() &&
        (device != "cpu" || w.threads() >= spec.threads())) {
      ++suit;
    }
  }
  if (suit >= want) return absl::OkStatus();
  std::string kind = device;
  if (device == "cpu" && spec.threads() > 0)
    absl::StrAppend(&kind, " (", spec.threads(), " threads)");
  return absl::InvalidArgumentError(absl::StrCat(
      "workers: the job needs ", Count(want, kind + " worker"), "; the cluster has ", suit,
      " registered: it would wait until more register (pass --queue to queue it all the same)"));
}

absl::StatusOr<std::string> MatchJobId(const std::vector<std::string>& ids,
                                       const std::string& name) {
  std::vector<std::string> matches;
  for (const std::string& id : ids) {
    if (id == name) return id;
    if (!name.empty() && absl::StartsWith(id, name)) matches.push_back(id);
  }
  if (matches.size() == 1) return matches[0];
  if (matches.empty()) return absl::NotFoundError(absl::StrCat("no job ", name));
  return absl::InvalidArgumentError(absl::StrCat(name, " names ", matches.size(), " jobs (",
                                                 absl::StrJoin(matches, ", "),
                                                 "): give more of the id"));
}

}  // namespace lockstep::cli
