#include "clients/cli/client.h"

#include <google/protobuf/util/json_util.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "clients/cli/progress.h"
#include "clients/cli/resume.h"
#include "core/status_macros.h"
#include "services/common/job_state.h"
#include "services/common/net.h"
#include "services/common/status.h"

namespace lockstep::cli {

namespace fs = std::filesystem;

std::string DefaultClusterDir() {
  if (const char* d = std::getenv("LOCKSTEP_CLUSTER_DIR")) return d;
  return ".lockstep-cluster";
}

absl::StatusOr<std::string> FindBinary(const std::string& name) {
  if (const char* d = std::getenv("LOCKSTEP_BIN_DIR")) {
    if (fs::exists(fs::path(d) / name)) return (fs::path(d) / name).string();
  }
  const fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  for (const fs::path& p : {self / name, self.parent_path() / "services" / name}) {
    if (fs::exists(p)) return p.string();
  }
  return absl::NotFoundError(
      absl::StrCat("cannot find ", name, " beside ", self.string(), " (set LOCKSTEP_BIN_DIR)"));
}

void AddConnectionOptions(CLI::App& app, ConnectionOptions& o) {
  const std::string group = "Connection";
  app.add_option("--coordinator", o.coordinator, "the coordinator's HOST:PORT")
      ->envname("LOCKSTEP_COORDINATOR")
      ->group(group);
  app.add_option("--credentials", o.credentials,
                 "a folder with ca.pem and admin.token (`lockstep certs`)")
      ->envname("LOCKSTEP_CREDENTIALS")
      ->group(group);
  app.add_option("--tls_ca", o.tls_ca, "the CA that signed the server's certificate")
      ->envname("LOCKSTEP_TLS_CA")
      ->group(group);
  app.add_option("--token_file", o.token_file, "a file with the bearer token")
      ->envname("LOCKSTEP_TOKEN_FILE")
      ->group(group);
  app.add_flag("--insecure", o.insecure, "plaintext, no token (a coordinator run --insecure)")
      ->envname("LOCKSTEP_INSECURE")
      ->group(group);
}

namespace {

// The address `lockstep cluster up` recorded, else 127.0.0.1:7070.
std::string LocalClusterAddress() {
  std::ifstream in(DefaultClusterDir() + "/cluster.json");
  if (in) {
    try {
      return nlohmann::json::parse(in).at("coordinator").get<std::string>();
    } catch (const std::exception&) {
    }
  }
  return "127.0.0.1:7070";
}

}  // namespace

absl::StatusOr<Connection> ResolveConnection(const ConnectionOptions& o) {
  Connection c;
  c.address = o.coordinator.empty() ? LocalClusterAddress() : o.coordinator;
  if (o.insecure) return c;
  std::string dir = o.credentials;
  TlsFiles files{o.tls_ca, "", ""};
  std::string token_file = o.token_file;
  if (dir.empty() && files.ca.empty()) {
    const std::string local = DefaultClusterDir() + "/credentials";
    if (fs::exists(local + "/ca.pem")) dir = local;
  }
  if (!dir.empty()) {
    if (files.ca.empty()) files.ca = dir + "/ca.pem";
    if (token_file.empty()) token_file = dir + "/admin.token";
  }
  if (files.ca.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no credentials for ", c.address,
                     ": pass --credentials DIR (made by `lockstep certs`), or --tls_ca FILE and "
                     "--token_file FILE, or --insecure for a plaintext coordinator"));
  }
  ASSIGN_OR_RETURN(c.transport, Transport::Tls(files));
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!(in >> c.token)) {
      return absl::InvalidArgumentError(absl::StrCat("--token_file: cannot read ", token_file));
    }
  }
  return c;
}

std::unique_ptr<v1::JobService::Stub> Connect(const Connection& c) {
  return v1::JobService::NewStub(
      MakeChannel(c.address, c.transport, kCoordinatorIdentity, c.token));
}

std::unique_ptr<grpc::ClientContext> Deadline(double seconds) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(seconds)));
  return ctx;
}

std::string StateName(v1::JobState s) { return v1::JobState_Name(s); }

void PrintJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;  // a loss of 0 or a step of 0 is still there
  (void)google::protobuf::util::MessageToJsonString(message, &out, opts);
  absl::PrintF("%s\n", out);
  std::fflush(stdout);  // a line at a time, also into a pipe (`watch --json | head`)
}

void PrintJob(const v1::Job& job, bool json) {
  if (json) {
    PrintJson(job);
    return;
  }
  const v1::JobSpec& spec = job.spec();
  const std::string label = !spec.name().empty()           ? spec.name()
                            : !spec.model().kind().empty() ? spec.model().kind()
                                                           : std::string("layers");
  absl::PrintF("%s  %s  %s  step %d/%d", job.id(), StateName(job.state()), label, job.step(),
               job.total_steps());
  if (job.step() > 0) absl::PrintF("  loss %.4f", job.last_loss());
  if (job.has_last_eval()) absl::PrintF("  test accuracy %.4f", job.last_eval().test_accuracy());
  absl::PrintF("  workers %d", job.spec().workers());
  if (!job.owner().empty()) absl::PrintF("  owner %s", job.owner());
  absl::PrintF("\n");
  if ((job.state() == v1::QUEUED || job.state() == v1::RECOVERING) && !job.waiting_for().empty()) {
    absl::PrintF("  waiting for %s\n", job.waiting_for());
  }
  if (job.recoveries() > 0 || job.snapshot_step() > 0) {
    absl::PrintF("  recoveries %d  last snapshot at step %d\n", job.recoveries(),
                 job.snapshot_step());
  }
  if (!job.failure_reason().empty()) {  // RECOVERING: why; FAILED: what went wrong
    absl::PrintF("  %s: %s\n", job.failure_code(), job.failure_reason());
  }
  if (!job.checkpoint_path().empty()) absl::PrintF("  checkpoint %s\n", job.checkpoint_path());
}

int WatchUntilDone(v1::JobService::Stub& stub, const std::string& id, WatchOutput output) {
  EventPrinter printer(id);
  EventResume resume;
  for (int attempt = 0; attempt < 30; ++attempt) {
    grpc::ClientContext ctx;  // a watch lasts as long as the job: no deadline
    v1::WatchJobRequest req;
    req.set_id(id);
    req.set_from_step(resume.from_step());
    auto reader = stub.WatchJob(&ctx, req);
    v1::JobEvent e;
    while (reader->Read(&e)) {
      if (!resume.First(e)) continue;
      if (output == WatchOutput::kProgress) printer.Print(e);
      if (output == WatchOutput::kJsonEvents) PrintJson(e);
    }
    grpc::Status st = reader->Finish();
    printer.Finish();
    auto get_ctx = Deadline(10);
    v1::GetJobRequest greq;
    greq.set_id(id);
    v1::Job job;
    grpc::Status gst = stub.GetJob(get_ctx.get(), greq, &job);
    if (gst.ok() && IsTerminal(job.state())) {
      if (output != WatchOutput::kJsonEvents) PrintJob(job, output == WatchOutput::kJsonJob);
      return job.state() == v1::SUCCEEDED ? 0 : 1;
    }
    if (!st.ok() && st.error_code() != grpc::StatusCode::UNAVAILABLE) {
      return Fail(FromGrpcStatus(st));
    }
    absl::SleepFor(absl::Seconds(1));  // the stream broke: resume from the last step seen
  }
  return Fail(absl::UnavailableError("lost the coordinator while watching " + id));
}

}  // namespace lockstep::cli
