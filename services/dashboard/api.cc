// DashboardApi: the dashboard's JSON API, a thin layer over the plain classes the gRPC service
// uses. Contract: api.h.
#include "services/dashboard/api.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "lockstep/v1/dashboard.pb.h"
#include "services/coordinator/api/job_access.h"

namespace lockstep {
namespace {

constexpr absl::string_view kPrefix = "/api/v1/";

std::string Json(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  return out;
}

// The integer query parameter `name` in [lo, hi], `fallback` when absent; INVALID_ARGUMENT
// naming it otherwise.
absl::StatusOr<int64_t> IntParam(const HttpRequest& r, const std::string& name, int64_t fallback,
                                 int64_t lo, int64_t hi) {
  auto it = r.query.find(name);
  if (it == r.query.end() || it->second.empty()) return fallback;
  int64_t v = 0;
  if (!absl::SimpleAtoi(it->second, &v) || v < lo || v > hi) {
    return absl::InvalidArgumentError(absl::StrCat("query parameter ", name,
                                                   ": want an integer from ", lo, " to ", hi,
                                                   ", got \"", it->second, "\""));
  }
  return v;
}

std::string Param(const HttpRequest& r, const std::string& name) {
  auto it = r.query.find(name);
  return it == r.query.end() ? "" : it->second;
}

// The events (or, with `logs`, the log lines) the job keeps now: those of its history
// before `from_step` left out, state events always in. Holds a watcher while it reads.
absl::StatusOr<std::vector<v1::JobEvent>> Kept(JobManager& jobs, const std::string& id, bool logs,
                                               int64_t from_step) {
  ASSIGN_OR_RETURN(std::unique_ptr<JobManager::Watch> watch, jobs.StartWatch(id, logs));
  const int64_t until = watch->replay_until();
  std::vector<v1::JobEvent> out;
  int64_t cursor = 0;
  for (;;) {
    EventLog::Batch b = watch->log()->Read(cursor, from_step, until, 512, until);
    for (v1::JobEvent& e : b.events) out.push_back(std::move(e));
    if (b.closed || b.next <= cursor) break;  // nothing more before `until`
    cursor = b.next;
  }
  return out;
}

// A route: /api/v1/<collection>[/<id>[/<what>]].
struct Parsed {
  std::string collection, id, what;
  std::string method;  // the one it takes
};

absl::StatusOr<Parsed> Parse(const std::string& path) {
  const absl::Status none = absl::NotFoundError(absl::StrCat("no API route ", path));
  if (!absl::StartsWith(path, kPrefix)) return none;
  std::vector<std::string> parts =
      absl::StrSplit(absl::string_view(path).substr(kPrefix.size()), '/');
  Parsed p;
  p.method = "GET";
  p.collection = parts[0];
  if (parts.size() == 1 &&
      (p.collection == "whoami" || p.collection == "jobs" || p.collection == "workers")) {
    return p;
  }
  if (p.collection != "jobs" || parts.size() > 3 || parts[1].empty()) return none;
  p.id = parts[1];
  if (parts.size() == 2) return p;
  p.what = parts[2];
  static const char* const kGets[] = {"history", "events", "logs", "witness", "workers"};
  if (p.what == "cancel") {
    p.method = "POST";
    return p;
  }
  for (const char* g : kGets) {
    if (p.what == g) return p;
  }
  return none;
}

}  // namespace

HttpReply DashboardApi::Handle(const HttpRequest& request) const {
  absl::StatusOr<Parsed> route = Parse(request.path);
  if (!route.ok()) return ErrorReply(route.status());
  if (request.method != route->method) {
    HttpReply reply = ErrorReply(absl::InvalidArgumentError(
        absl::StrCat(request.path, " takes ", route->method, ", not ", request.method)));
    reply.code = 405;
    reply.headers.emplace_back("Allow", route->method);
    return reply;
  }
  absl::StatusOr<Principal> who = guard_->Client(request.authorization, {});
  if (!who.ok()) return ErrorReply(who.status());
  absl::StatusOr<std::string> body =
      Route(route->collection, route->id, route->what, request, *who);
  if (!body.ok()) return ErrorReply(body.status());
  HttpReply reply;
  reply.body = *std::move(body);
  return reply;
}

absl::StatusOr<std::string> DashboardApi::Route(const std::string& collection,
                                                const std::string& id, const std::string& what,
                                                const HttpRequest& request,
                                                const Principal& who) const {
  if (collection == "whoami") {
    v1::Caller caller;
    caller.set_name(who.name);
    caller.set_admin(who.admin);
    return Json(caller);
  }
  if (collection == "workers") return Workers(who);
  if (id.empty()) return ListJobs(request, who);
  return JobRoute(id, what, request, who);
}

absl::StatusOr<std::string> DashboardApi::ListJobs(const HttpRequest& request,
                                                   const Principal& who) const {
  v1::ListJobsRequest list;
  for (absl::string_view s : absl::StrSplit(Param(request, "state"), ',', absl::SkipEmpty())) {
    v1::JobState state;
    if (!v1::JobState_Parse(absl::AsciiStrToUpper(s), &state) ||
        state == v1::JOB_STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat(
          "query parameter state: unknown job state \"", s,
          "\" (QUEUED, RUNNING, RECOVERING, SUSPENDED, SUCCEEDED, FAILED, CANCELLED)"));
    }
    list.add_states(state);
  }
  const std::string owner = Param(request, "owner");
  if (!who.admin && !owner.empty() && owner != who.name) {
    return absl::PermissionDeniedError(
        absl::StrCat("users see their own jobs only (", who.name, "), not ", owner, "'s"));
  }
  list.set_owner(who.admin ? owner : who.name);
  ASSIGN_OR_RETURN(const int64_t limit, IntParam(request, "limit", 0, 0, 100000));
  const std::string name = absl::AsciiStrToLower(Param(request, "name"));
  v1::ListJobsResponse all = jobs_->List(list);
  v1::ListJobsResponse out;
  for (v1::Job& job : *all.mutable_jobs()) {
    if (!name.empty() && !absl::StrContains(absl::AsciiStrToLower(job.spec().name()), name) &&
        !absl::StrContains(job.id(), name)) {
      continue;
    }
    if (limit > 0 && out.jobs_size() >= limit) break;
    *out.add_jobs() = std::move(job);
  }
  return Json(out);
}

absl::StatusOr<std::string> DashboardApi::JobRoute(const std::string& id, const std::string& what,
                                                   const HttpRequest& request,
                                                   const Principal& who) const {
  ASSIGN_OR_RETURN(v1::Job job, JobFor(*jobs_, who, id));
  if (what.empty()) return Json(job);
  if (what == "history") return History(id, request);
  if (what == "events") return Events(id);
  if (what == "logs") return Logs(id, request);
  if (what == "workers") return JobWorkers(job);
  if (what == "witness") {
    ASSIGN_OR_RETURN(const v1::JobWitness witness, jobs_->Witness(id));
    return Json(witness);
  }
  ASSIGN_OR_RETURN(const v1::Job cancelled, jobs_->Cancel(id));  // "cancel"
  return Json(cancelled);
}

absl::StatusOr<std::string> DashboardApi::History(const std::string& id,
                                                  const HttpRequest& request) const {
  ASSIGN_OR_RETURN(const int64_t from_step,
                   IntParam(request, "from_step", 0, 0, std::numeric_limits<int64_t>::max()));
  ASSIGN_OR_RETURN(std::vector<v1::JobEvent> kept, Kept(*jobs_, id, false, from_step));
  v1::JobEvents out;
  for (v1::JobEvent& e : kept) {
    if (e.has_step() || e.has_eval()) *out.add_events() = std::move(e);
  }
  return Json(out);
}

absl::StatusOr<std::string> DashboardApi::Events(const std::string& id) const {
  ASSIGN_OR_RETURN(std::vector<v1::JobEvent> kept,
                   Kept(*jobs_, id, false, std::numeric_limits<int64_t>::max()));
  v1::JobEvents out;
  for (v1::JobEvent& e : kept) {
    if (e.has_state()) *out.add_events() = std::move(e);
  }
  return Json(out);
}

absl::StatusOr<std::string> DashboardApi::Logs(const std::string& id,
                                               const HttpRequest& request) const {
  ASSIGN_OR_RETURN(const int64_t tail, IntParam(request, "tail", 200, 1, 10000));
  ASSIGN_OR_RETURN(std::vector<v1::JobEvent> kept, Kept(*jobs_, id, true, 0));
  // Workers ship their lines with heartbeats: in time order, not arrival order.
  std::stable_sort(kept.begin(), kept.end(), [](const v1::JobEvent& a, const v1::JobEvent& b) {
    return a.log().unix_ms() < b.log().unix_ms();
  });
  v1::JobLogs out;
  const size_t first = kept.size() > static_cast<size_t>(tail) ? kept.size() - tail : 0;
  for (size_t i = first; i < kept.size(); ++i) {
    if (kept[i].has_log()) *out.add_lines() = std::move(*kept[i].mutable_log());
  }
  return Json(out);
}

absl::StatusOr<std::string> DashboardApi::JobWorkers(const v1::Job& job) const {
  std::map<std::string, v1::WorkerInfo> known;
  for (v1::WorkerInfo& w : pool_->List()) known[w.id()] = std::move(w);
  v1::ListWorkersResponse out;  // rank order
  for (const std::string& id : job.workers()) {
    auto it = known.find(id);
    if (it != known.end()) {
      v1::WorkerInfo& w = *out.add_workers() = it->second;
      if (w.job_id() != job.id()) w.clear_job_id();  // it runs another's job now: not theirs
    } else {
      out.add_workers()->set_id(id);  // gone from the pool since
    }
  }
  return Json(out);
}

absl::StatusOr<std::string> DashboardApi::Workers(const Principal& who) const {
  if (!who.admin) return absl::PermissionDeniedError("listing workers is for admins");
  v1::ListWorkersResponse out;
  for (v1::WorkerInfo& w : pool_->List()) *out.add_workers() = std::move(w);
  return Json(out);
}

}  // namespace lockstep
