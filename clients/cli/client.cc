// Client side of the CLI: the coordinator's address (flag, LOCKSTEP_COORDINATOR, or the local
// cluster's file) and a JobService stub with deadlines. Contract: client.h.
#include "clients/cli/client.h"

#include <google/protobuf/util/json_util.h>
#include <grpc/support/log.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "clients/cli/job_text.h"
#include "clients/cli/progress.h"
#include "clients/cli/resume.h"
#include "clients/cli/terminal_text.h"
#include "core/status_macros.h"
#include "services/common/rpc/job_state.h"
#include "services/common/rpc/net.h"
#include "services/common/rpc/status.h"

namespace lockstep::cli {

namespace fs = std::filesystem;

std::string DefaultClusterDir() {
  const char* d = std::getenv("LOCKSTEP_CLUSTER_DIR");
  return d != nullptr && *d != '\0' ? d : ".lockstep-cluster";
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
  app.add_option("--dir", o.cluster_dir,
                 "the local cluster's folder (`cluster up --dir`), for its address and "
                 "credentials; default ./.lockstep-cluster")
      ->envname("LOCKSTEP_CLUSTER_DIR")
      ->group(group);
  app.add_option("--credentials", o.credentials,
                 "a folder with ca.pem and admin.token (`lockstep certs`)")
      ->envname("LOCKSTEP_CREDENTIALS")
      ->group(group);
  app.add_option("--tls-ca", o.tls_ca, "the CA that signed the server's certificate")
      ->envname("LOCKSTEP_TLS_CA")
      ->group(group);
  app.add_option("--token-file", o.token_file, "a file with the bearer token")
      ->envname("LOCKSTEP_TOKEN_FILE")
      ->group(group);
  app.add_flag("--insecure", o.insecure, "plaintext, no token (a coordinator run --insecure)")
      ->envname("LOCKSTEP_INSECURE")
      ->group(group);
}

namespace {

// INVALID_ARGUMENT unless `address` is HOST:PORT with a port in 1..65535.
absl::Status CheckHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 || address.back() == ']' ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--coordinator ", address,
                     ": not HOST:PORT with a port in 1..65535 (e.g. 127.0.0.1:7070)"));
  }
  return absl::OkStatus();
}

// The folder --dir names, else $LOCKSTEP_CLUSTER_DIR (both in `dir`), else the default;
// `named`: whether it was named (then it must hold a cluster).
std::string ClusterDir(const ConnectionOptions& o, bool* named) {
  *named = !o.cluster_dir.empty();
  return *named ? o.cluster_dir : DefaultClusterDir();
}

// The address `lockstep cluster up` recorded in the cluster folder, with where it came
// from; 127.0.0.1:7070 when the default folder holds no cluster. NOT_FOUND naming a
// folder that was named and holds none.
absl::Status FindAddress(const ConnectionOptions& o, Connection* c) {
  if (!o.coordinator.empty()) {
    c->address = o.coordinator;
    c->origin = "--coordinator";
    return absl::OkStatus();
  }
  bool named = false;
  const std::string dir = ClusterDir(o, &named);
  std::ifstream in(dir + "/cluster.json");
  if (in) {
    try {
      c->address = nlohmann::json::parse(in).at("coordinator").get<std::string>();
      c->origin = "the cluster in " + dir;
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return absl::DataLossError(absl::StrCat(dir, "/cluster.json: ", e.what()));
    }
  }
  if (named) {
    return absl::NotFoundError(absl::StrCat(
        "no Lockstep cluster in ", dir, " (no cluster.json; from --dir or $LOCKSTEP_CLUSTER_DIR): ",
        "start one with `lockstep cluster up --dir ", dir,
        "`, or pass the folder of a running one, or --coordinator HOST:PORT"));
  }
  c->address = "127.0.0.1:7070";
  c->origin = absl::StrCat("the default address: no cluster in ", dir);
  return absl::OkStatus();
}

// Transport::Tls, its errors naming the CLI's option (--tls-ca), not the servers' flag.
absl::StatusOr<Transport> ClientTls(const TlsFiles& files) {
  absl::StatusOr<Transport> t = Transport::Tls(files);
  if (t.ok() || !absl::StartsWith(t.status().message(), "--tls_ca")) return t;
  return absl::Status(t.status().code(), absl::StrCat("--tls-ca", t.status().message().substr(8)));
}

bool Contains(const std::string& text, std::initializer_list<const char*> any) {
  const std::string lower = absl::AsciiStrToLower(text);
  for (const char* a : any) {
    if (absl::StrContains(lower, absl::AsciiStrToLower(a))) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<Connection> ResolveConnection(const ConnectionOptions& o) {
  Connection c;
  if (!o.coordinator.empty()) RETURN_IF_ERROR(CheckHostPort(o.coordinator));
  if (o.insecure) {
    RETURN_IF_ERROR(FindAddress(o, &c));
    return c;
  }
  std::string dir = o.credentials;
  TlsFiles files{o.tls_ca, "", ""};
  std::string token_file = o.token_file;
  // Named credentials are read first: their errors name their files.
  const bool named = !dir.empty() || !files.ca.empty();
  if (named) {
    if (!dir.empty() && files.ca.empty()) files.ca = dir + "/ca.pem";
    ASSIGN_OR_RETURN(c.transport, ClientTls(files));
  }
  RETURN_IF_ERROR(FindAddress(o, &c));
  if (!named) {
    bool dir_named = false;
    const std::string cluster_dir = ClusterDir(o, &dir_named);
    const std::string local = cluster_dir + "/credentials";
    if (fs::exists(local + "/ca.pem")) {
      dir = local;
      files.ca = dir + "/ca.pem";
    } else if (o.coordinator.empty() && !dir_named && !fs::exists(cluster_dir + "/cluster.json")) {
      // Nothing named a coordinator, and there is no cluster here.
      std::error_code ec;
      return absl::NotFoundError(absl::StrCat(
          "no cluster here (no ", cluster_dir, " in ", fs::current_path(ec).string(),
          "): start one with `lockstep cluster up`, or pass --dir DIR of a running one (or set "
          "LOCKSTEP_CLUSTER_DIR), or --coordinator HOST:PORT with --credentials DIR"));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("no credentials for ", c.address,
                       ": pass --credentials DIR (made by `lockstep certs`), or --tls-ca FILE and "
                       "--token-file FILE, or --insecure for a plaintext coordinator"));
    }
    ASSIGN_OR_RETURN(c.transport, ClientTls(files));
  }
  c.ca = files.ca;
  if (!dir.empty() && token_file.empty()) token_file = dir + "/admin.token";
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!(in >> c.token)) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file: cannot read ", token_file));
    }
  }
  return c;
}

absl::Status Explain(const Connection& c, const absl::Status& st) {
  if (st.code() != absl::StatusCode::kUnavailable) return st;
  const std::string m(st.message());
  if (c.transport.secure() && Contains(m, {"certificate verify failed", "CERTIFICATE_VERIFY"})) {
    return absl::UnavailableError(absl::StrCat(
        "the coordinator at ", c.address, " (", c.origin, ") has a certificate that ", c.ca,
        " did not sign: these credentials belong to another cluster; pass this cluster's "
        "with --credentials DIR"));
  }
  if (c.transport.secure() &&
      Contains(m, {"wrong version number", "WRONG_VERSION_NUMBER", "packet length too long"})) {
    return absl::UnavailableError(absl::StrCat("the coordinator at ", c.address, " (", c.origin,
                                               ") does not speak TLS: it runs --insecure; "
                                               "pass --insecure"));
  }
  if (!c.transport.secure() && Contains(m, {"Socket closed", "Connection reset", "Broken pipe"})) {
    return absl::UnavailableError(
        absl::StrCat("the coordinator at ", c.address, " (", c.origin,
                     ") closed a plaintext connection: it speaks TLS; drop --insecure and pass its "
                     "--credentials DIR"));
  }
  if (Contains(m, {"Connection refused", "failed to connect", "DNS resolution failed",
                   "No route to host"})) {
    return absl::UnavailableError(absl::StrCat(
        "no coordinator answers at ", c.address, " (", c.origin,
        "): start a cluster with `lockstep cluster up`, or pass --dir DIR of a running one, or "
        "--coordinator HOST:PORT"));
  }
  return st;
}

int Fail(const Connection& c, const grpc::Status& st) {
  return Fail(Explain(c, FromGrpcStatus(st)));
}

void QuietGrpcLogs() {
  gpr_set_log_function([](gpr_log_func_args*) {});
}

std::unique_ptr<v1::JobService::Stub> Connect(const Connection& c) {
  return v1::JobService::NewStub(
      MakeChannel(c.address, c.transport, kCoordinatorIdentity, c.token));
}

absl::StatusOr<std::string> ResolveJobId(v1::JobService::Stub& stub, const std::string& name) {
  v1::GetJobRequest req;
  req.set_id(name);
  v1::Job job;
  grpc::Status st = stub.GetJob(Deadline(30).get(), req, &job);
  if (st.ok()) return name;
  if (st.error_code() != grpc::StatusCode::NOT_FOUND) return FromGrpcStatus(st);
  v1::ListJobsResponse all;
  st = stub.ListJobs(Deadline(30).get(), v1::ListJobsRequest(), &all);
  if (!st.ok()) return FromGrpcStatus(st);
  std::vector<std::string> ids;
  for (const v1::Job& j : all.jobs()) ids.push_back(j.id());
  return MatchJobId(ids, name);
}

v1::Job AwaitEnd(v1::JobService::Stub& stub, const v1::Job& job, absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::WatchJobRequest req;
  req.set_id(job.id());
  req.set_from_step(std::numeric_limits<int64_t>::max());  // no steps: only its states
  auto reader = stub.WatchJob(&ctx, req);
  for (v1::JobEvent e; reader->Read(&e);) {
  }
  if (!reader->Finish().ok()) return job;
  v1::GetJobRequest get;
  get.set_id(job.id());
  v1::Job now;
  return stub.GetJob(Deadline(10).get(), get, &now).ok() ? now : job;
}

std::unique_ptr<grpc::ClientContext> Deadline(double seconds) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(seconds)));
  return ctx;
}

std::string StateName(v1::JobState s) { return v1::JobState_Name(s); }

void PrintJson(const google::protobuf::Message& message, bool indented) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = indented;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;  // a loss of 0 or a step of 0 is still there
  (void)google::protobuf::util::MessageToJsonString(message, &out, opts);
  if (!out.empty() && out.back() == '\n') out.pop_back();  // add_whitespace ends in one
  absl::PrintF("%s\n", out);
  std::fflush(stdout);  // a line at a time, also into a pipe (`watch --json | head`)
}

void PrintJob(const v1::Job& job, bool json) {
  if (json) {
    PrintJson(job);
    return;
  }
  absl::PrintF("%s", JobText(job));
}

namespace {

// The job now: NOT OK when the coordinator does not answer.
grpc::Status GetJob(v1::JobService::Stub& stub, const std::string& id, v1::Job* job) {
  auto ctx = Deadline(10);
  v1::GetJobRequest req;
  req.set_id(id);
  return stub.GetJob(ctx.get(), req, job);
}

bool Waits(v1::JobState state) {
  return state == v1::QUEUED || state == v1::RECOVERING || state == v1::SUSPENDED;
}

// What SIGINT prints while a watch runs (written by the handler: no allocation there).
char interrupt_message[512];
size_t interrupt_length = 0;

void OnInterrupt(int) {
  ssize_t ignored = write(STDERR_FILENO, interrupt_message, interrupt_length);
  (void)ignored;
  _exit(130);
}

// Ctrl-C from now on says that the job goes on, and how to watch it again or cancel it.
void SayTheJobGoesOnWhenInterrupted(const std::string& id) {
  const std::string message = absl::StrCat(
      "\n", id, " goes on running; only the watch stopped. Follow it again: lockstep watch ", id,
      "  (or: lockstep logs ", id, " -f);  stop it: lockstep cancel ", id, "\n");
  interrupt_length = std::min(message.size(), sizeof(interrupt_message));
  std::memcpy(interrupt_message, message.data(), interrupt_length);
  struct sigaction action = {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
}

}  // namespace

int WatchUntilDone(const Connection& connection, v1::JobService::Stub& stub, const std::string& id,
                   const WatchOptions& options) {
  const WatchOutput output = options.output;
  const absl::Duration timeout = options.timeout;
  const absl::Time deadline = absl::Now() + timeout;
  EventPrinter printer(id, options.progress);
  EventResume resume;
  if (options.from_now) {
    v1::Job job;
    if (grpc::Status st = GetJob(stub, id, &job); !st.ok()) return Fail(connection, st);
    if (IsTerminal(job.state())) {
      if (output != WatchOutput::kJsonEvents) PrintJob(job, output == WatchOutput::kJsonJob);
      return job.state() == v1::SUCCEEDED ? 0 : 1;
    }
    resume.StartAt(job.step());
  }
  SayTheJobGoesOnWhenInterrupted(id);
  bool reached = false;  // the coordinator answered once
  for (int attempt = 0; attempt < 30; ++attempt) {
    grpc::ClientContext ctx;  // a watch lasts as long as the job: no deadline but `timeout`
    if (deadline != absl::InfiniteFuture()) ctx.set_deadline(absl::ToChronoTime(deadline));
    v1::WatchJobRequest req;
    req.set_id(id);
    req.set_from_step(resume.from_step());
    auto reader = stub.WatchJob(&ctx, req);
    v1::JobEvent e;
    while (reader->Read(&e)) {
      reached = true;
      if (!resume.First(e)) continue;
      if (output == WatchOutput::kProgress) printer.Print(e);
      if (output == WatchOutput::kJsonEvents) PrintJson(e);
      v1::Job now;
      if (output == WatchOutput::kProgress && e.has_state() && Waits(e.state().state()) &&
          GetJob(stub, id, &now).ok() && Waits(now.state()) && !now.waiting_for().empty()) {
        printer.Note(absl::StrCat(id, " waiting for ", Printable(now.waiting_for())));
      }
    }
    grpc::Status st = reader->Finish();
    printer.Finish();
    v1::Job job;
    grpc::Status gst = GetJob(stub, id, &job);
    reached = reached || gst.ok();
    if (!reached && Explain(connection, FromGrpcStatus(st)) != FromGrpcStatus(st)) {
      return Fail(connection, st);  // never reached: no coordinator there, or not this way
    }
    if (gst.ok() && IsTerminal(job.state())) {
      if (output != WatchOutput::kJsonEvents) PrintJob(job, output == WatchOutput::kJsonJob);
      return job.state() == v1::SUCCEEDED ? 0 : 1;
    }
    if (absl::Now() >= deadline) {
      std::string what = gst.ok() ? StateName(job.state()) : "not known to have ended";
      if (gst.ok() && Waits(job.state()) && !job.waiting_for().empty()) {
        absl::StrAppend(&what, ", waiting for ", job.waiting_for());
      }
      return Fail(absl::DeadlineExceededError(
          absl::StrCat(id, " is still ", what, " after ", absl::FormatDuration(timeout))));
    }
    if (!st.ok() && st.error_code() != grpc::StatusCode::UNAVAILABLE) return Fail(connection, st);
    absl::SleepFor(absl::Seconds(1));  // the stream broke: resume from the last step seen
  }
  return Fail(absl::UnavailableError("lost the coordinator while watching " + id));
}

}  // namespace lockstep::cli
