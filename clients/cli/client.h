// Client side of the CLI: the coordinator's address (flag, LOCKSTEP_COORDINATOR, or the
// local cluster's file) and a JobService stub with deadlines.
#ifndef LOCKSTEP_CLIENTS_CLI_CLIENT_H_
#define LOCKSTEP_CLIENTS_CLI_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "clients/cli/commands.h"
#include "lockstep/v1/job.grpc.pb.h"
#include "services/common/rpc/net.h"

namespace lockstep::cli {

// The default cluster directory: $LOCKSTEP_CLUSTER_DIR or ./.lockstep-cluster.
std::string DefaultClusterDir();

// A Lockstep program: in $LOCKSTEP_BIN_DIR, else beside this one (an install, or the
// CLI's build folder), else in the build tree's services/. NOT_FOUND saying where.
absl::StatusOr<std::string> FindBinary(const std::string& name);

// How the CLI reaches a server: its address, and TLS with the cluster's CA plus a bearer
// token (or plaintext).
struct Connection {
  std::string address;
  std::string origin;  // where the address came from, for errors: "--coordinator", ...
  std::string ca;      // the CA file checking the server (empty in plaintext)
  Transport transport = Transport::Plaintext();
  std::string token;
};
// The options that say how to reach the coordinator, each bound to $LOCKSTEP_<NAME>.
struct ConnectionOptions {
  std::string coordinator;  // HOST:PORT
  std::string cluster_dir;  // a local cluster's folder (`cluster up --dir`); empty: the default
  std::string credentials;  // a folder with ca.pem and admin.token
  std::string tls_ca;
  std::string token_file;
  bool insecure = false;
};
// Adds --coordinator, --dir, --credentials, --tls-ca, --token-file and --insecure to `app`.
void AddConnectionOptions(CLI::App& app, ConnectionOptions& options);
// The coordinator: --coordinator (or $LOCKSTEP_COORDINATOR; HOST:PORT, else
// INVALID_ARGUMENT), else the address `lockstep cluster up` recorded in the cluster
// directory (--dir, $LOCKSTEP_CLUSTER_DIR: NOT_FOUND naming it when it holds no cluster),
// else, when the default ./.lockstep-cluster holds none, 127.0.0.1:7070. TLS with the CA
// and token of --credentials DIR (as `lockstep certs` and `cluster up` make them), --tls-ca
// and --token-file overriding its parts, read before the address is looked for; without
// any of them, the local cluster's credentials. NOT_FOUND "no cluster here" when nothing
// names a coordinator and there is no local cluster; INVALID_ARGUMENT saying what to pass
// when no credentials are found for a named one.
absl::StatusOr<Connection> ResolveConnection(const ConnectionOptions& options);
// A failed call's status in one line a user can act on when the connection itself failed:
// no coordinator answering at the address (and where the address came from), a
// certificate another cluster's CA signed, a plaintext client at a TLS coordinator or the
// reverse. Other statuses come back as they are.
absl::Status Explain(const Connection& connection, const absl::Status& status);
// Fail(Explain(connection, the call's status)).
int Fail(const Connection& connection, const grpc::Status& status);
// Keeps the gRPC library's own log lines (e.g. a failed TLS handshake's) off stderr: the
// CLI says what failed in one line of its own.
void QuietGrpcLogs();
std::unique_ptr<v1::JobService::Stub> Connect(const Connection& connection);

// The help of a JOB argument.
inline constexpr char kJobHelp[] = "the job's id, or a prefix of it that names one job";

// `name` when the coordinator knows a job by it, else the one job whose id starts with it
// (among those ListJobs shows the caller): MatchJobId's errors, or the call's.
absl::StatusOr<std::string> ResolveJobId(v1::JobService::Stub& stub, const std::string& name);

// The job once its event stream has ended (the job has), or `job` as given if it does
// not within `timeout` or the coordinator cannot say.
v1::Job AwaitEnd(v1::JobService::Stub& stub, const v1::Job& job, absl::Duration timeout);

// A context whose deadline is `seconds` away.
std::unique_ptr<grpc::ClientContext> Deadline(double seconds);

// Prints a message as JSON with the .proto field names, zero-valued fields included: one
// line, or `indented` over many (as kubectl's -o json); flushes stdout.
void PrintJson(const google::protobuf::Message& message, bool indented = false);
// Prints a job (human form or JSON).
void PrintJob(const v1::Job& job, bool json);
std::string StateName(v1::JobState state);

// What WatchUntilDone prints: a live progress bar and the final job; each event as a line
// of JSON (JSON lines, flushed); or only the final job as JSON.
enum class WatchOutput { kProgress, kJsonEvents, kJsonJob };

// How WatchUntilDone watches.
struct WatchOptions {
  WatchOutput output = WatchOutput::kProgress;
  // Where the progress goes: stdout for `watch` (its output, for pipes), stderr where the
  // final job is the output (`wait`, `submit --wait`).
  FILE* progress = stderr;
  // Only what happens from now on: a job that has ended is printed at once, a running
  // one's steps from its current step (`wait`: not its history).
  bool from_now = false;
  absl::Duration timeout = absl::InfiniteDuration();
};

// Streams WatchJob until the job ends, resuming from the last step seen when the stream
// breaks, each event printed once; with progress, what a QUEUED or RECOVERING job waits
// for. Ctrl-C (SIGINT) stops watching, not the job: it exits 130 saying so and how to
// watch again or cancel. Exit code: 0 if SUCCEEDED, 1 otherwise, and 1 after `timeout`
// with DEADLINE_EXCEEDED saying the job's state (and what it waits for).
int WatchUntilDone(const Connection& connection, v1::JobService::Stub& stub, const std::string& id,
                   const WatchOptions& options);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_CLIENT_H_
