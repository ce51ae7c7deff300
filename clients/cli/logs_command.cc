// `lockstep logs JOB [-f] [--json]`: a job's events (WatchJob) and the servers' log lines
// about it (WatchLogs: the coordinator's and its workers'), printed as they come from two
// streams read side by side. Without -f, what the coordinator holds now; with -f, then
// everything new until the job ends.
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"
#include "services/common/status.h"

namespace lockstep::cli {
namespace {

std::string Time(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

// One event or log line, in the human form.
std::string Describe(const v1::JobEvent& e) {
  std::string what;
  if (e.has_step()) {
    const v1::StepEvent& s = e.step();
    what = absl::StrFormat("step %d/%d  loss %.4f  accuracy %.4f  %.0f samples/s", s.step(),
                           s.total_steps(), s.loss(), s.accuracy(), s.samples_per_sec());
  } else if (e.has_eval()) {
    what = absl::StrFormat("eval at step %d  loss %.4f  accuracy %.4f", e.eval().step(),
                           e.eval().test_loss(), e.eval().test_accuracy());
  } else if (e.has_state()) {
    what = absl::StrCat("state ", StateName(e.state().state()),
                        e.state().reason().empty() ? "" : ": ", e.state().reason());
  } else if (e.has_log()) {
    const v1::LogLine& l = e.log();
    what = absl::StrCat(l.level(), "  ", l.source());
    if (!l.worker().empty() && l.worker() != l.source()) absl::StrAppend(&what, " ", l.worker());
    if (l.has_rank()) absl::StrAppend(&what, " rank ", l.rank());
    absl::StrAppend(&what, ": ", l.message());
  }
  return absl::StrCat(Time(e.unix_ms()), "  ", what);
}

// Reads one stream to its end, printing each message under `mu`.
template <typename Reader>
absl::Status Drain(Reader& reader, bool json, absl::Mutex* mu) {
  for (v1::JobEvent e; reader.Read(&e);) {
    absl::MutexLock lock(mu);
    if (json) {
      PrintJson(e);
    } else {
      absl::PrintF("%s\n", Describe(e));
    }
    std::fflush(stdout);
  }
  return FromGrpcStatus(reader.Finish());
}

// Prints the job's events and its servers' log lines as they come (with `follow`, until
// the job ends; else what is kept now). The exit code: 0, or Fail's for the first error.
int ShowJobLogs(v1::JobService::Stub& stub, const std::string& job_id, bool follow, bool json) {
  // Without -f both streams end once the history is out; with it, when the job ends.
  const absl::Duration limit = follow ? absl::Hours(24 * 365) : absl::Seconds(60);
  grpc::ClientContext events_ctx, logs_ctx;
  events_ctx.set_deadline(absl::ToChronoTime(absl::Now() + limit));
  logs_ctx.set_deadline(absl::ToChronoTime(absl::Now() + limit));
  v1::WatchJobRequest events_req;
  events_req.set_id(job_id);
  events_req.set_history_only(!follow);
  v1::WatchLogsRequest logs_req;
  logs_req.set_id(job_id);
  logs_req.set_follow(follow);
  auto events = stub.WatchJob(&events_ctx, events_req);
  auto logs = stub.WatchLogs(&logs_ctx, logs_req);
  absl::Mutex mu;
  absl::Status logs_status;
  std::thread logs_reader([&] { logs_status = Drain(*logs, json, &mu); });
  const absl::Status events_status = Drain(*events, json, &mu);
  if (!events_status.ok()) logs_ctx.TryCancel();  // e.g. not the caller's job: say it once
  logs_reader.join();
  if (!events_status.ok()) return Fail(events_status);
  if (!logs_status.ok()) return Fail(logs_status);
  return 0;
}

}  // namespace

void AddLogsCommand(CLI::App& app, Commands& out) {
  struct Options {
    ConnectionOptions connection;
    std::string id;
    bool follow = false;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("logs", "a job's events and its servers' log lines");
  AddConnectionOptions(*sub, o->connection);
  sub->add_option("JOB", o->id, "the job's id")->required();
  sub->add_flag("-f,--follow", o->follow, "go on printing what comes until the job ends");
  sub->add_flag("--json", o->json, "print each event and log line as a line of JSON");
  out.push_back({sub, [o] {
                   const absl::StatusOr<Connection> conn = ResolveConnection(o->connection);
                   if (!conn.ok()) return Fail(conn.status());
                   auto stub = Connect(*conn);
                   return ShowJobLogs(*stub, o->id, o->follow, o->json);
                 }});
}

}  // namespace lockstep::cli
