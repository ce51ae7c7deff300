// Client side of the CLI: the coordinator's address (flag, LOCKSTEP_COORDINATOR, or the
// local cluster's file) and a JobService stub with deadlines.
#ifndef LOCKSTEP_CLIENTS_CLI_CLIENT_H_
#define LOCKSTEP_CLIENTS_CLI_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "clients/cli/commands.h"
#include "lockstep/v1/job.grpc.pb.h"
#include "services/common/net.h"

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
  Transport transport = Transport::Plaintext();
  std::string token;
};
// The options that say how to reach the coordinator, each bound to $LOCKSTEP_<NAME>.
struct ConnectionOptions {
  std::string coordinator;  // HOST:PORT
  std::string credentials;  // a folder with ca.pem and admin.token
  std::string tls_ca;
  std::string token_file;
  bool insecure = false;
};
// Adds --coordinator, --credentials, --tls_ca, --token_file and --insecure to `app`.
void AddConnectionOptions(CLI::App& app, ConnectionOptions& options);
// The coordinator: --coordinator (or $LOCKSTEP_COORDINATOR), else the address `lockstep
// cluster up` recorded in the cluster directory, else 127.0.0.1:7070. TLS with the CA and
// token of --credentials DIR (as `lockstep certs` and `cluster up` make them), --tls_ca
// and --token_file overriding its parts; without any of them, the local cluster's
// credentials. INVALID_ARGUMENT saying what to pass when no credentials are found.
absl::StatusOr<Connection> ResolveConnection(const ConnectionOptions& options);
std::unique_ptr<v1::JobService::Stub> Connect(const Connection& connection);

// A context whose deadline is `seconds` away.
std::unique_ptr<grpc::ClientContext> Deadline(double seconds);

// Prints a message as one line of JSON with the .proto field names, zero-valued fields
// included, and flushes stdout.
void PrintJson(const google::protobuf::Message& message);
// Prints a job (human form or JSON).
void PrintJob(const v1::Job& job, bool json);
std::string StateName(v1::JobState state);

// What WatchUntilDone prints: a live progress bar (stderr) and the final job; each event
// as a line of JSON (JSON lines, flushed); or only the final job as JSON.
enum class WatchOutput { kProgress, kJsonEvents, kJsonJob };

// Streams WatchJob until the job ends, resuming from the last step seen when the stream
// breaks, each event printed once. Exit code: 0 if SUCCEEDED, 1 otherwise.
int WatchUntilDone(v1::JobService::Stub& stub, const std::string& id, WatchOutput output);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_CLIENT_H_
