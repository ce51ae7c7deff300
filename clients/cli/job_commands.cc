// submit, list, status, watch, cancel, workers, checkpoint: the JobService from the
// command line.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"
#include "core/spec/spec.h"
#include "services/common/status.h"

namespace lockstep::cli {
namespace {

int Usage(const char* text) {
  absl::FPrintF(stderr, "usage: lockstep %s\n", text);
  return 2;
}

// `lockstep COMMAND JOB [--json]`: one call about a job that answers with the job.
template <typename Request>
int JobCommand(Args& args, const char* usage,
               grpc::Status (v1::JobService::Stub::*method)(grpc::ClientContext*, const Request&,
                                                            v1::Job*)) {
  const absl::StatusOr<Connection> conn = ResolveConnection(args);
  const bool json = args.Flag("json");
  auto pos = args.Positional();
  if (!args.Done() || pos.size() != 1) return Usage(usage);
  if (!conn.ok()) return Fail(conn.status());
  auto stub = Connect(*conn);
  auto ctx = Deadline(30);
  Request req;
  req.set_id(pos[0]);
  v1::Job job;
  grpc::Status st = ((*stub).*method)(ctx.get(), req, &job);
  if (!st.ok()) return Fail(FromGrpcStatus(st));
  PrintJob(job, json);
  return 0;
}

}  // namespace

int SubmitCommand(Args& args) {
  const absl::StatusOr<Connection> conn = ResolveConnection(args);
  const bool wait = args.Flag("wait"), json = args.Flag("json");
  const std::string request_id = args.Value("request-id", "");
  const std::string workers = args.Value("workers", "");
  auto pos = args.Positional();
  if (!args.Done() || pos.size() != 1) {
    return Usage(
        "submit SPEC [--wait] [--json] [--workers N] [--request-id ID] [--coordinator HOST:PORT]");
  }
  auto spec = LoadSpecFile(pos[0]);
  if (!spec.ok()) return Fail(spec.status());
  if (!request_id.empty()) spec->set_request_id(request_id);
  if (!workers.empty()) {
    auto n = ParseInt("workers", workers);
    if (!n.ok()) return Fail(n.status());
    spec->set_workers(*n);
  }
  if (!conn.ok()) return Fail(conn.status());
  auto stub = Connect(*conn);
  auto ctx = Deadline(30);
  v1::Job job;
  grpc::Status st = stub->SubmitJob(ctx.get(), *spec, &job);
  if (!st.ok()) return Fail(FromGrpcStatus(st));
  if (!wait) {
    PrintJob(job, json);
    return 0;
  }
  if (!json) absl::FPrintF(stderr, "submitted %s to %s\n", job.id(), conn->address);
  return WatchUntilDone(*stub, job.id(), json);
}

int ListCommand(Args& args) {
  const absl::StatusOr<Connection> conn = ResolveConnection(args);
  const bool json = args.Flag("json");
  const std::string state = args.Value("state", "");
  if (!args.Done() || !args.Positional().empty()) {
    return Usage("list [--state QUEUED|RUNNING|SUCCEEDED|FAILED|CANCELLED] [--json]");
  }
  v1::ListJobsRequest req;
  if (!state.empty()) {
    v1::JobState s;
    if (!v1::JobState_Parse(state, &s))
      return Fail(absl::InvalidArgumentError("--state: unknown state " + state));
    req.add_states(s);
  }
  if (!conn.ok()) return Fail(conn.status());
  auto stub = Connect(*conn);
  auto ctx = Deadline(30);
  v1::ListJobsResponse resp;
  grpc::Status st = stub->ListJobs(ctx.get(), req, &resp);
  if (!st.ok()) return Fail(FromGrpcStatus(st));
  if (json) {
    PrintJson(resp);
    return 0;
  }
  if (resp.jobs().empty()) absl::PrintF("no jobs\n");
  for (const auto& job : resp.jobs()) PrintJob(job, false);
  return 0;
}

int StatusCommand(Args& args) {
  return JobCommand(args, "status JOB [--json]", &v1::JobService::Stub::GetJob);
}

int WatchCommand(Args& args) {
  const absl::StatusOr<Connection> conn = ResolveConnection(args);
  const bool json = args.Flag("json");
  auto pos = args.Positional();
  if (!args.Done() || pos.size() != 1) return Usage("watch JOB [--json]");
  if (!conn.ok()) return Fail(conn.status());
  auto stub = Connect(*conn);
  return WatchUntilDone(*stub, pos[0], json);
}

int CancelCommand(Args& args) {
  return JobCommand(args, "cancel JOB [--json]", &v1::JobService::Stub::CancelJob);
}

int WorkersCommand(Args& args) {
  const absl::StatusOr<Connection> conn = ResolveConnection(args);
  const bool json = args.Flag("json");
  if (!args.Done() || !args.Positional().empty()) return Usage("workers [--json]");
  if (!conn.ok()) return Fail(conn.status());
  auto stub = Connect(*conn);
  auto ctx = Deadline(30);
  v1::ListWorkersResponse resp;
  grpc::Status st = stub->ListWorkers(ctx.get(), v1::ListWorkersRequest(), &resp);
  if (!st.ok()) return Fail(FromGrpcStatus(st));
  if (json) {
    PrintJson(resp);
    return 0;
  }
  for (const auto& w : resp.workers()) {
    absl::PrintF("%s  %s  %s  %s  threads %d  %s\n", w.id(), w.address(), w.device(), w.name(),
                 w.threads(), w.job_id().empty() ? "free" : "running " + w.job_id());
  }
  if (resp.workers().empty()) absl::PrintF("no workers registered\n");
  return 0;
}

int CheckpointCommand(Args& args) {
  const absl::StatusOr<Connection> conn = ResolveConnection(args);
  const std::string out = args.Value("o", args.Value("output", ""));
  const std::string step = args.Value("step", "");
  auto pos = args.Positional();
  if (!args.Done() || pos.size() != 1 || out.empty()) {
    return Usage("checkpoint JOB [--step S] -o FILE");
  }
  v1::GetCheckpointRequest req;
  req.set_id(pos[0]);
  if (!step.empty()) {
    auto s = ParseInt("step", step);
    if (!s.ok()) return Fail(s.status());
    req.set_step(*s);
  }
  if (!conn.ok()) return Fail(conn.status());
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
  std::filesystem::rename(part, out, ec);
  if (ec) return Fail(absl::PermissionDeniedError(absl::StrCat(out, ": ", ec.message())));
  absl::PrintF("wrote %s: job %s at step %d, %d bytes\n", out, pos[0], at_step, got);
  return 0;
}

}  // namespace lockstep::cli
