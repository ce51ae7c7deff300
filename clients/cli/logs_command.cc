// `lockstep logs JOB [-f] [--json] [--tail N] [--since DURATION] [--no-steps] [--level
// LEVEL]`: a job's events
// (WatchJob) and the servers' log lines about it (WatchLogs: the coordinator's and its
// workers'). What the coordinator holds now, read from both streams, is printed in time
// order (log_order.h); with -f, then everything new as it comes until the job ends.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"
#include "clients/cli/job_text.h"
#include "clients/cli/log_order.h"
#include "services/common/rpc/status.h"

namespace lockstep::cli {
namespace {

void Print(const v1::JobEvent& e, bool json) {
  if (json) {
    PrintJson(e);
  } else {
    absl::PrintF("%s\n", EventText(e));
  }
  std::fflush(stdout);
}

// Reads one stream to its end, handing each message to `take` under `mu`.
template <typename Reader>
absl::Status Drain(Reader& reader, absl::Mutex* mu, const std::function<void(v1::JobEvent)>& take) {
  for (v1::JobEvent e; reader.Read(&e);) {
    absl::MutexLock lock(mu);
    take(std::move(e));
  }
  return FromGrpcStatus(reader.Finish());
}

// Both streams read side by side until they end (`follow`: until the job does), each
// message handed to `take` under one lock. The first error of the two, if any.
absl::Status ReadBoth(v1::JobService::Stub& stub, const std::string& job_id, bool follow,
                      const std::function<void(v1::JobEvent)>& take) {
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
  std::thread logs_reader([&] { logs_status = Drain(*logs, &mu, take); });
  const absl::Status events_status = Drain(*events, &mu, take);
  if (!events_status.ok()) logs_ctx.TryCancel();  // e.g. not the caller's job: say it once
  logs_reader.join();
  return !events_status.ok() ? events_status : logs_status;
}

struct LogsOptions {
  ConnectionOptions connection;
  std::string id;
  bool follow = false;
  bool json = false;
  std::optional<int64_t> tail;
  std::string since;
  bool no_steps = false;
  std::string level;  // the least severe log lines shown; empty: all
};

// Prints what the coordinator keeps of the job's events and log lines in time order (those
// of --since, the last --tail), then with `follow` what comes, as it comes, until the job
// ends. The exit code: 0, or Fail's for the first error.
int ShowJobLogs(const Connection& conn, v1::JobService::Stub& stub, const std::string& job_id,
                const LogsOptions& o) {
  std::vector<v1::JobEvent> kept;
  absl::Status st =
      ReadBoth(stub, job_id, false, [&](v1::JobEvent e) { kept.push_back(std::move(e)); });
  if (!st.ok()) return Fail(Explain(conn, st));
  // What the follow streams replay of it is skipped, each once (a worker's lines may come
  // late, older than what was printed: they are new all the same).
  std::multiset<std::string> replayed;
  for (const v1::JobEvent& e : kept) replayed.insert(e.SerializeAsString());
  std::optional<int64_t> since;
  if (!o.since.empty()) since = absl::ToUnixMillis(absl::Now() - ParseDurationArg(o.since));
  const LogFilter filter = {.steps = !o.no_steps,
                            .min_severity = o.level.empty() ? 0 : Severity(o.level)};
  std::erase_if(kept, [&](const v1::JobEvent& e) { return !Keep(e, filter); });
  for (const v1::JobEvent& e : SelectEvents(std::move(kept), since, o.tail)) Print(e, o.json);
  if (!o.follow) return 0;
  st = ReadBoth(stub, job_id, true, [&](v1::JobEvent e) {
    if (auto it = replayed.find(e.SerializeAsString()); it != replayed.end()) {
      replayed.erase(it);
      return;
    }
    if (Keep(e, filter)) Print(e, o.json);
  });
  return st.ok() ? 0 : Fail(Explain(conn, st));
}

}  // namespace

void AddLogsCommand(CLI::App& app, Commands& out) {
  auto o = std::make_shared<LogsOptions>();
  CLI::App* sub =
      app.add_subcommand("logs", "a job's events and its servers' log lines, in time order");
  AddConnectionOptions(*sub, o->connection);
  sub->add_option("JOB", o->id, kJobHelp)->required();
  sub->add_flag("-f,--follow", o->follow, "go on printing what comes until the job ends");
  sub->add_flag("--json", o->json, "print each event and log line as a line of JSON");
  sub->add_option("--tail", o->tail, "only the last N of what is kept (then, with -f, what comes)")
      ->check(AtLeast(0))
      ->type_name("N");
  sub->add_option("--since", o->since, "only what is newer than this (90s, 5m, 1h30m)")
      ->check(DurationArg())
      ->type_name("DURATION");
  sub->add_flag("--no-steps", o->no_steps,
                "leave out the step events: the evaluations, state changes and log lines");
  std::vector<std::string> levels(std::begin(kLogLevels), std::end(kLogLevels));
  sub->add_option(
         "--level", o->level,
         "only log lines this severe or more: " + absl::StrJoin(levels, ", ") + " (events stay)")
      ->check(CLI::IsMember(levels))
      ->type_name("LEVEL");
  out.push_back({sub, [o] {
                   const absl::StatusOr<Connection> conn = ResolveConnection(o->connection);
                   if (!conn.ok()) return Fail(conn.status());
                   auto stub = Connect(*conn);
                   const absl::StatusOr<std::string> id = ResolveJobId(*stub, o->id);
                   if (!id.ok()) return Fail(Explain(*conn, id.status()));
                   return ShowJobLogs(*conn, *stub, *id, *o);
                 }});
}

}  // namespace lockstep::cli
