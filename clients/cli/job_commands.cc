// submit, list, status, watch, wait, cancel, workers, checkpoint: the JobService from the
// command line.
#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"
#include "clients/cli/job_text.h"
#include "clients/cli/terminal_text.h"
#include "core/io/safetensors.h"
#include "core/spec/spec.h"
#include "services/common/rpc/job_state.h"
#include "services/common/rpc/status.h"

namespace lockstep::cli {
namespace {

// What every job command takes: how to reach the coordinator, and --json.
struct JobOptions {
  ConnectionOptions connection;
  bool json = false;
};

CLI::App* AddJobCommand(CLI::App& app, const std::string& name, const std::string& description,
                        JobOptions& o, const std::string& json_help = "print JSON") {
  CLI::App* sub = app.add_subcommand(name, description);
  AddConnectionOptions(*sub, o.connection);
  sub->add_flag("--json", o.json, json_help);
  return sub;
}

// `lockstep COMMAND JOB [--json]`: one call about a job that answers with the job.
// With `until_ended`, the job is printed once it has ended (cancel: it stops within
// seconds), as it was when the call answered if it has not within a minute.
template <typename Request>
void AddOneJobCommand(CLI::App& app, Commands& out, const std::string& name,
                      const std::string& description,
                      grpc::Status (v1::JobService::Stub::*method)(grpc::ClientContext*,
                                                                   const Request&, v1::Job*),
                      bool until_ended = false) {
  struct Options : JobOptions {
    std::string id;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = AddJobCommand(app, name, description, *o);
  sub->add_option("JOB", o->id, kJobHelp)->required();
  out.push_back({sub, [o, method, until_ended] {
                   const absl::StatusOr<Connection> conn = ResolveConnection(o->connection);
                   if (!conn.ok()) return Fail(conn.status());
                   auto stub = Connect(*conn);
                   auto ctx = Deadline(30);
                   const absl::StatusOr<std::string> id = ResolveJobId(*stub, o->id);
                   if (!id.ok()) return Fail(Explain(*conn, id.status()));
                   Request req;
                   req.set_id(*id);
                   v1::Job job;
                   grpc::Status st = ((*stub).*method)(ctx.get(), req, &job);
                   if (!st.ok()) return Fail(*conn, st);
                   if (until_ended && !IsTerminal(job.state())) {
                     job = AwaitEnd(*stub, job, absl::Minutes(1));
                   }
                   PrintJob(job, o->json);
                   return 0;
                 }});
}

// --timeout DURATION of the commands that wait for a job to end.
void AddTimeout(CLI::App& sub, std::string& timeout) {
  sub.add_option("--timeout", timeout,
                 "give up after this long (90s, 5m, 1h30m): exit 1 saying the job's state and "
                 "what it waits for")
      ->check(DurationArg())
      ->type_name("DURATION");
}

absl::Duration TimeoutOf(const std::string& timeout) {
  return timeout.empty() ? absl::InfiniteDuration() : ParseDurationArg(timeout);
}

struct SubmitOptions : JobOptions {
  std::string spec_file;
  bool wait = false;
  std::string timeout;
  int workers = 0;
  std::string request_id;
  bool queue = false;
};

int Submit(const SubmitOptions& o) {
  auto spec = LoadSpecFile(o.spec_file);
  if (!spec.ok()) return FailArgumentFile(spec.status());
  if (!o.request_id.empty()) spec->set_request_id(o.request_id);
  if (o.workers > 0) spec->set_workers(o.workers);
  const absl::StatusOr<Connection> conn = ResolveConnection(o.connection);
  if (!conn.ok()) return Fail(conn.status());
  auto stub = Connect(*conn);
  if (!o.queue) {  // a job no registered workers can run would wait for good
    v1::ListWorkersResponse registered;
    grpc::Status st = stub->ListWorkers(Deadline(30).get(), v1::ListWorkersRequest(), &registered);
    if (!st.ok()) return Fail(*conn, st);
    const absl::Status fits =
        CheckCanFit(*spec, {registered.workers().begin(), registered.workers().end()});
    if (!fits.ok()) return Fail(fits);
  }
  auto ctx = Deadline(30);
  v1::Job job;
  grpc::Status st = stub->SubmitJob(ctx.get(), *spec, &job);
  if (!st.ok() && absl::StrContains(st.error_message(), "outside the data roots")) {
    return Fail(absl::Status(
        FromGrpcStatus(st).code(),
        absl::StrCat(st.error_message(),
                     ": let a local cluster's jobs read a folder with `lockstep cluster data-root "
                     "add FOLDER` (or `cluster up --data-root FOLDER`); elsewhere it is the "
                     "servers' --data_root (deploy/CONFIGURATION.md)")));
  }
  if (!st.ok()) return Fail(*conn, st);
  if (!o.wait) {
    PrintJob(job, o.json);
    if (!o.json) {  // what comes next, as Ray prints at submit (stderr: stdout is the job)
      absl::FPrintF(stderr,
                    "follow it: lockstep watch %s   its logs: lockstep logs %s -f   "
                    "stop it: lockstep cancel %s\n",
                    job.id(), job.id(), job.id());
    }
    return 0;
  }
  if (!o.json) {
    absl::FPrintF(stderr, "submitted %s to %s (Ctrl-C stops the watch, not the job)\n", job.id(),
                  conn->address);
  }
  return WatchUntilDone(*conn, *stub, job.id(),
                        {.output = o.json ? WatchOutput::kJsonJob : WatchOutput::kProgress,
                         .timeout = TimeoutOf(o.timeout)});
}

void AddSubmit(CLI::App& app, Commands& out) {
  auto o = std::make_shared<SubmitOptions>();
  CLI::App* sub = AddJobCommand(app, "submit", "queue a job spec (YAML or JSON) on the cluster", *o,
                                "print the job (with --wait: the final job) as JSON");
  sub->add_option("SPEC", o->spec_file, "the job spec file")->required();
  sub->add_flag("--wait", o->wait,
                "watch the job's progress until it ends; exit 0 if it succeeded");
  AddTimeout(*sub, o->timeout);
  sub->add_option("--workers", o->workers, "override the spec's worker count")->check(AtLeast(1));
  sub->add_flag("--queue", o->queue,
                "queue the job even if the registered workers could never run it (it waits "
                "until enough register)");
  sub->add_option("--request-id", o->request_id,
                  "an idempotency key: resubmitting the same spec returns the job it made; "
                  "another spec with it is ALREADY_EXISTS");
  out.push_back({sub, [o] {
                   if (!o->timeout.empty() && !o->wait) {
                     return Fail(absl::InvalidArgumentError("--timeout: only with --wait"));
                   }
                   return Submit(*o);
                 }});
}

struct ListOptions : JobOptions {
  std::vector<std::string> states;
  int limit = 0;
  std::string output;  // "wide", "json"
};

int List(const ListOptions& o) {
  v1::ListJobsRequest req;
  for (std::string name : o.states) {
    absl::AsciiStrToUpper(&name);
    v1::JobState s;
    if (!v1::JobState_Parse(name, &s) || s == v1::JOB_STATE_UNSPECIFIED) {
      return Fail(absl::InvalidArgumentError("--state: unknown state " + name));
    }
    req.add_states(s);
  }
  req.set_limit(o.limit);
  const absl::StatusOr<Connection> conn = ResolveConnection(o.connection);
  if (!conn.ok()) return Fail(conn.status());
  auto stub = Connect(*conn);
  auto ctx = Deadline(30);
  v1::ListJobsResponse resp;
  grpc::Status st = stub->ListJobs(ctx.get(), req, &resp);
  if (!st.ok()) return Fail(*conn, st);
  if (o.json || o.output == "json") {
    PrintJson(resp, /*indented=*/true);
    return 0;
  }
  if (o.output == "jsonl") {
    for (const v1::Job& job : resp.jobs()) PrintJson(job);
    return 0;
  }
  if (o.output == "name") {  // ids only, as kubectl's -o name (and the shell completion)
    for (const v1::Job& job : resp.jobs()) absl::PrintF("%s\n", job.id());
    return 0;
  }
  if (resp.jobs().empty()) {
    absl::PrintF("no jobs\n");
    return 0;
  }
  absl::PrintF("%s", JobTable({resp.jobs().begin(), resp.jobs().end()},
                              absl::ToUnixMillis(absl::Now()), o.output == "wide"));
  return 0;
}

void AddList(CLI::App& app, Commands& out) {
  auto o = std::make_shared<ListOptions>();
  CLI::App* sub = AddJobCommand(app, "list", "list jobs, newest first: a table, a line a job", *o,
                                "print {\"jobs\": [...]} as indented JSON");
  sub->add_option("--state", o->states,
                  "only jobs in these states: QUEUED, RUNNING, RECOVERING, SUSPENDED, SUCCEEDED, "
                  "FAILED, CANCELLED (comma-separated or repeated)")
      ->delimiter(',')
      ->type_name("STATE,...")
      ->default_str("");
  sub->add_option("--limit", o->limit, "at most N jobs (0: all)")
      ->check(AtLeast(0))
      ->type_name("N");
  sub->add_option("-o,--output", o->output,
                  "wide: the table with samples/s, the workers' ids, the owner and why a job "
                  "waits or failed; json: as --json (indented); jsonl: a job a line (JSON "
                  "lines); name: the ids only")
      ->check(CLI::IsMember({"wide", "json", "jsonl", "name"}))
      ->type_name("FORMAT");
  out.push_back({sub, [o] { return List(*o); }});
}

// `watch JOB`: its events until it ends; `wait JOB`: the same, printing the final job.
void AddWatch(CLI::App& app, Commands& out, const std::string& name, const std::string& description,
              const std::string& json_help, bool events) {
  struct Options : JobOptions {
    std::string id;
    std::string timeout;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = AddJobCommand(app, name, description, *o, json_help);
  sub->add_option("JOB", o->id, kJobHelp)->required();
  AddTimeout(*sub, o->timeout);
  out.push_back({sub, [o, events] {
                   const absl::StatusOr<Connection> conn = ResolveConnection(o->connection);
                   if (!conn.ok()) return Fail(conn.status());
                   auto stub = Connect(*conn);
                   WatchOptions watch;
                   watch.output = !o->json ? WatchOutput::kProgress
                                  : events ? WatchOutput::kJsonEvents
                                           : WatchOutput::kJsonJob;
                   // `watch` prints the progress as its output; `wait` the final job,
                   // once, without replaying the job's history.
                   watch.progress = events ? stdout : stderr;
                   watch.from_now = !events;
                   watch.timeout = TimeoutOf(o->timeout);
                   const absl::StatusOr<std::string> id = ResolveJobId(*stub, o->id);
                   if (!id.ok()) return Fail(Explain(*conn, id.status()));
                   return WatchUntilDone(*conn, *stub, *id, watch);
                 }});
}

// `describe JOB`: the job, its spec, its workers by rank, its newest snapshot and its state
// events (with their reasons: recoveries, failures); in JSON {"job": ..., "events": [...]}.
int Describe(const JobOptions& o, const std::string& name) {
  const absl::StatusOr<Connection> conn = ResolveConnection(o.connection);
  if (!conn.ok()) return Fail(conn.status());
  auto stub = Connect(*conn);
  const absl::StatusOr<std::string> id = ResolveJobId(*stub, name);
  if (!id.ok()) return Fail(Explain(*conn, id.status()));
  v1::GetJobRequest get;
  get.set_id(*id);
  v1::Job job;
  if (grpc::Status st = stub->GetJob(Deadline(30).get(), get, &job); !st.ok()) {
    return Fail(*conn, st);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  v1::WatchJobRequest watch;
  watch.set_id(*id);
  watch.set_history_only(true);
  watch.set_from_step(std::numeric_limits<int64_t>::max());  // its states, not its steps
  auto reader = stub->WatchJob(&ctx, watch);
  std::vector<v1::JobEvent> events;
  for (v1::JobEvent e; reader->Read(&e);) {
    if (e.has_state()) events.push_back(std::move(e));
  }
  if (grpc::Status st = reader->Finish(); !st.ok()) return Fail(*conn, st);
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  const auto json = [&](const google::protobuf::Message& m) {
    std::string text;
    (void)google::protobuf::util::MessageToJsonString(m, &text, opts);
    return text;
  };
  if (o.json) {
    std::vector<std::string> each;
    for (const v1::JobEvent& e : events) each.push_back(json(e));
    absl::PrintF("{\"job\":%s,\"events\":[%s]}\n", json(job), absl::StrJoin(each, ","));
    return 0;
  }
  absl::PrintF("%s", JobText(job));
  opts.add_whitespace = true;
  opts.always_print_primitive_fields = false;  // the spec as given and its defaults
  absl::PrintF("Spec:\n%s", PrintableLines(json(job.spec())));
  absl::PrintF("Workers:%s\n", job.workers().empty() ? " none now" : "");
  for (int r = 0; r < job.workers_size(); ++r) {
    absl::PrintF("  rank %d  %s\n", r, Printable(job.workers(r)));
  }
  absl::PrintF("Snapshot: %s\n", job.snapshot_step() > 0
                                     ? absl::StrCat("step ", job.snapshot_step())
                                     : std::string("none yet"));
  absl::PrintF("Events:\n");
  for (const v1::JobEvent& e : events) absl::PrintF("  %s\n", EventText(e));
  return 0;
}

int Workers(const JobOptions& o) {
  const absl::StatusOr<Connection> conn = ResolveConnection(o.connection);
  if (!conn.ok()) return Fail(conn.status());
  auto stub = Connect(*conn);
  auto ctx = Deadline(30);
  v1::ListWorkersResponse resp;
  grpc::Status st = stub->ListWorkers(ctx.get(), v1::ListWorkersRequest(), &resp);
  if (!st.ok()) return Fail(*conn, st);
  if (o.json) {
    PrintJson(resp);
    return 0;
  }
  if (resp.workers().empty()) {
    absl::PrintF("no workers registered\n");
    return 0;
  }
  absl::PrintF("%s", WorkersTable({resp.workers().begin(), resp.workers().end()}));
  return 0;
}

struct CheckpointOptions {
  ConnectionOptions connection;
  std::string id;
  std::string output;
  CLI::Option* step_option = nullptr;
  int64_t step = 0;
  bool force = false;
};

int Checkpoint(const CheckpointOptions& o) {
  const std::string& out = o.output;
  std::error_code exists_ec;
  if (!o.force && std::filesystem::exists(out, exists_ec)) {
    return Fail(absl::AlreadyExistsError(
        absl::StrCat(out, " exists: pass --force to overwrite it, or another -o FILE")));
  }
  const absl::StatusOr<Connection> conn = ResolveConnection(o.connection);
  if (!conn.ok()) return Fail(conn.status());
  auto stub = Connect(*conn);
  const absl::StatusOr<std::string> id = ResolveJobId(*stub, o.id);
  if (!id.ok()) return Fail(Explain(*conn, id.status()));
  v1::GetCheckpointRequest req;
  req.set_id(*id);
  if (o.step_option->count() > 0) req.set_step(o.step);
  auto ctx = Deadline(3600);
  auto reader = stub->GetCheckpoint(ctx.get(), req);
  // Into FILE.part, renamed once whole: an interrupted download leaves no torn FILE.
  const std::string part = out + ".part";
  std::ofstream file(part, std::ios::binary | std::ios::trunc);
  if (!file) return Fail(absl::PermissionDeniedError(absl::StrCat(out, ": cannot write here")));
  v1::CheckpointChunk chunk;
  int64_t at_step = -1;
  uint64_t total = 0, got = 0;
  while (reader->Read(&chunk)) {
    if (at_step < 0) {
      at_step = chunk.step();
      total = chunk.total_bytes();
    }
    file.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
    got += chunk.data().size();
  }
  file.close();
  grpc::Status st = reader->Finish();
  std::error_code ec;
  if (!st.ok() || !file || got != total || at_step < 0) {
    std::filesystem::remove(part, ec);
    if (!st.ok()) return Fail(*conn, st);
    return Fail(absl::DataLossError(
        absl::StrCat(out, ": ", got, " of ", total, " bytes arrived or could be written")));
  }
  // Every byte arrived; the file's digests say whether they are the ones written.
  if (absl::StatusOr<SafeTensors> read = SafeTensors::Read(part); !read.ok()) {
    std::filesystem::remove(part, ec);
    return Fail(read.status());
  }
  std::filesystem::rename(part, out, ec);
  if (ec) return Fail(absl::PermissionDeniedError(absl::StrCat(out, ": ", ec.message())));
  absl::PrintF("wrote %s: job %s at step %d, %d bytes\n", Printable(out), *id, at_step, got);
  return 0;
}

void AddCheckpoint(CLI::App& app, Commands& out) {
  auto o = std::make_shared<CheckpointOptions>();
  CLI::App* sub = app.add_subcommand(
      "checkpoint",
      "download a job's state (safetensors, Flax names): its final checkpoint, else its newest "
      "snapshot, or the kept snapshot of --step");
  AddConnectionOptions(*sub, o->connection);
  sub->add_option("JOB", o->id, kJobHelp)->required();
  sub->add_option("-o,--output", o->output, "the file to write")->required();
  o->step_option = sub->add_option("--step", o->step, "the step of a kept snapshot");
  sub->add_flag("--force", o->force, "overwrite the output file if it exists");
  out.push_back({sub, [o] { return Checkpoint(*o); }});
}

}  // namespace

void AddJobCommands(CLI::App& app, Commands& out) {
  AddSubmit(app, out);
  AddList(app, out);
  AddOneJobCommand(app, out, "status", "show a job", &v1::JobService::Stub::GetJob);
  struct DescribeOptions : JobOptions {
    std::string id;
  };
  auto describe = std::make_shared<DescribeOptions>();
  CLI::App* describe_app = AddJobCommand(
      app, "describe", "show a job in full: its spec, workers, snapshot and state events",
      *describe, "print {\"job\": ..., \"events\": [...]} as JSON");
  describe_app->add_option("JOB", describe->id, kJobHelp)->required();
  out.push_back({describe_app, [describe] { return Describe(*describe, describe->id); }});
  AddWatch(app, out, "watch", "follow a job until it ends; exit 0 if it succeeded",
           "print each event (step, evaluation, state) as a line of JSON", true);
  AddWatch(app, out, "wait", "wait until a job ends, then print it; exit 0 if it succeeded",
           "print the final job as JSON", false);
  AddOneJobCommand(app, out, "cancel", "cancel a job and wait until it has stopped; print it",
                   &v1::JobService::Stub::CancelJob, /*until_ended=*/true);
  auto workers = std::make_shared<JobOptions>();
  CLI::App* workers_app =
      AddJobCommand(app, "workers", "list the registered workers; `workers revoke ID`", *workers);
  AddWorkersRevokeCommand(*workers_app, out);
  out.push_back({workers_app, [workers] { return Workers(*workers); }});
  AddCheckpoint(app, out);
}

}  // namespace lockstep::cli
