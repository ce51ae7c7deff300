// submit, list, status, watch, cancel, workers, checkpoint: the JobService from the
// command line.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"
#include "core/io/safetensors.h"
#include "core/spec/spec.h"
#include "services/common/status.h"

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
template <typename Request>
void AddOneJobCommand(CLI::App& app, Commands& out, const std::string& name,
                      const std::string& description,
                      grpc::Status (v1::JobService::Stub::*method)(grpc::ClientContext*,
                                                                   const Request&, v1::Job*)) {
  struct Options : JobOptions {
    std::string id;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = AddJobCommand(app, name, description, *o);
  sub->add_option("JOB", o->id, "the job's id")->required();
  out.push_back({sub, [o, method] {
                   const absl::StatusOr<Connection> conn = ResolveConnection(o->connection);
                   if (!conn.ok()) return Fail(conn.status());
                   auto stub = Connect(*conn);
                   auto ctx = Deadline(30);
                   Request req;
                   req.set_id(o->id);
                   v1::Job job;
                   grpc::Status st = ((*stub).*method)(ctx.get(), req, &job);
                   if (!st.ok()) return Fail(FromGrpcStatus(st));
                   PrintJob(job, o->json);
                   return 0;
                 }});
}

struct SubmitOptions : JobOptions {
  std::string spec_file;
  bool wait = false;
  int workers = 0;
  std::string request_id;
};

int Submit(const SubmitOptions& o) {
  auto spec = LoadSpecFile(o.spec_file);
  if (!spec.ok()) return Fail(spec.status());
  if (!o.request_id.empty()) spec->set_request_id(o.request_id);
  if (o.workers > 0) spec->set_workers(o.workers);
  const absl::StatusOr<Connection> conn = ResolveConnection(o.connection);
  if (!conn.ok()) return Fail(conn.status());
  auto stub = Connect(*conn);
  auto ctx = Deadline(30);
  v1::Job job;
  grpc::Status st = stub->SubmitJob(ctx.get(), *spec, &job);
  if (!st.ok()) return Fail(FromGrpcStatus(st));
  if (!o.wait) {
    PrintJob(job, o.json);
    return 0;
  }
  if (!o.json) absl::FPrintF(stderr, "submitted %s to %s\n", job.id(), conn->address);
  return WatchUntilDone(*stub, job.id(), o.json ? WatchOutput::kJsonJob : WatchOutput::kProgress);
}

void AddSubmit(CLI::App& app, Commands& out) {
  auto o = std::make_shared<SubmitOptions>();
  CLI::App* sub = AddJobCommand(app, "submit", "queue a job spec (YAML or JSON) on the cluster", *o,
                                "print the job (with --wait: the final job) as JSON");
  sub->add_option("SPEC", o->spec_file, "the job spec file")->required();
  sub->add_flag("--wait", o->wait,
                "watch the job's progress until it ends; exit 0 if it succeeded");
  sub->add_option("--workers", o->workers, "override the spec's worker count")->check(AtLeast(1));
  sub->add_option("--request-id", o->request_id,
                  "an idempotency key: resubmitting returns the job it made");
  out.push_back({sub, [o] { return Submit(*o); }});
}

struct ListOptions : JobOptions {
  std::vector<std::string> states;
  int limit = 0;
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
  if (!st.ok()) return Fail(FromGrpcStatus(st));
  if (o.json) {
    PrintJson(resp);
    return 0;
  }
  if (resp.jobs().empty()) absl::PrintF("no jobs\n");
  for (const auto& job : resp.jobs()) PrintJob(job, false);
  return 0;
}

void AddList(CLI::App& app, Commands& out) {
  auto o = std::make_shared<ListOptions>();
  CLI::App* sub = AddJobCommand(app, "list", "list jobs, newest first", *o);
  sub->add_option("--state", o->states,
                  "only jobs in these states: QUEUED, RUNNING, RECOVERING, SUCCEEDED, FAILED, "
                  "CANCELLED (comma-separated or repeated)")
      ->delimiter(',')
      ->type_name("STATE,...")
      ->default_str("");
  sub->add_option("--limit", o->limit, "at most N jobs (0: all)")
      ->check(AtLeast(0))
      ->type_name("N");
  out.push_back({sub, [o] { return List(*o); }});
}

void AddWatch(CLI::App& app, Commands& out) {
  struct Options : JobOptions {
    std::string id;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = AddJobCommand(app, "watch", "follow a job until it ends; exit 0 if it succeeded",
                                *o, "print each event (step, evaluation, state) as a line of JSON");
  sub->add_option("JOB", o->id, "the job's id")->required();
  out.push_back({sub, [o] {
                   const absl::StatusOr<Connection> conn = ResolveConnection(o->connection);
                   if (!conn.ok()) return Fail(conn.status());
                   auto stub = Connect(*conn);
                   return WatchUntilDone(
                       *stub, o->id, o->json ? WatchOutput::kJsonEvents : WatchOutput::kProgress);
                 }});
}

int Workers(const JobOptions& o) {
  const absl::StatusOr<Connection> conn = ResolveConnection(o.connection);
  if (!conn.ok()) return Fail(conn.status());
  auto stub = Connect(*conn);
  auto ctx = Deadline(30);
  v1::ListWorkersResponse resp;
  grpc::Status st = stub->ListWorkers(ctx.get(), v1::ListWorkersRequest(), &resp);
  if (!st.ok()) return Fail(FromGrpcStatus(st));
  if (o.json) {
    PrintJson(resp);
    return 0;
  }
  for (const auto& w : resp.workers()) {
    absl::PrintF("%s  %s  %s  %s  threads %d  %s\n", w.id(), w.address(), w.device(), w.name(),
                 w.threads(),
                 !w.quarantined().empty() ? "quarantined: " + w.quarantined()
                 : w.job_id().empty()     ? std::string("free")
                                          : "running " + w.job_id());
  }
  if (resp.workers().empty()) absl::PrintF("no workers registered\n");
  return 0;
}

struct CheckpointOptions {
  ConnectionOptions connection;
  std::string id;
  std::string output;
  CLI::Option* step_option = nullptr;
  int64_t step = 0;
};

int Checkpoint(const CheckpointOptions& o) {
  v1::GetCheckpointRequest req;
  req.set_id(o.id);
  if (o.step_option->count() > 0) req.set_step(o.step);
  const absl::StatusOr<Connection> conn = ResolveConnection(o.connection);
  if (!conn.ok()) return Fail(conn.status());
  const std::string& out = o.output;
  auto stub = Connect(*conn);
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
    if (!st.ok()) return Fail(FromGrpcStatus(st));
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
  absl::PrintF("wrote %s: job %s at step %d, %d bytes\n", out, o.id, at_step, got);
  return 0;
}

void AddCheckpoint(CLI::App& app, Commands& out) {
  auto o = std::make_shared<CheckpointOptions>();
  CLI::App* sub = app.add_subcommand(
      "checkpoint",
      "download a job's state (safetensors, Flax names): its final checkpoint, else its newest "
      "snapshot, or the kept snapshot of --step");
  AddConnectionOptions(*sub, o->connection);
  sub->add_option("JOB", o->id, "the job's id")->required();
  sub->add_option("-o,--output", o->output, "the file to write")->required();
  o->step_option = sub->add_option("--step", o->step, "the step of a kept snapshot");
  out.push_back({sub, [o] { return Checkpoint(*o); }});
}

}  // namespace

void AddJobCommands(CLI::App& app, Commands& out) {
  AddSubmit(app, out);
  AddList(app, out);
  AddOneJobCommand(app, out, "status", "show a job", &v1::JobService::Stub::GetJob);
  AddWatch(app, out);
  AddOneJobCommand(app, out, "cancel", "cancel a job", &v1::JobService::Stub::CancelJob);
  auto workers = std::make_shared<JobOptions>();
  CLI::App* workers_app =
      AddJobCommand(app, "workers", "list the registered workers; `workers revoke ID`", *workers);
  AddWorkersRevokeCommand(*workers_app, out);
  out.push_back({workers_app, [workers] { return Workers(*workers); }});
  AddCheckpoint(app, out);
}

}  // namespace lockstep::cli
