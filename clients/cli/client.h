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

// --coordinator, else $LOCKSTEP_COORDINATOR, else the address `lockstep cluster up`
// recorded in the cluster directory, else 127.0.0.1:7070.
std::string CoordinatorAddress(Args& args);

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
// Reads --coordinator, --credentials DIR (ca.pem and admin.token, as `lockstep certs` and
// `cluster up` make them), --tls_ca, --token_file and --insecure (each also
// $LOCKSTEP_<NAME>); without any of them, the local cluster's credentials. Consumes those
// options whatever happens; INVALID_ARGUMENT saying what to pass when no credentials are
// found.
absl::StatusOr<Connection> ResolveConnection(Args& args);
std::unique_ptr<v1::JobService::Stub> Connect(const Connection& connection);

// A context whose deadline is `seconds` away.
std::unique_ptr<grpc::ClientContext> Deadline(double seconds);

// Prints a message as JSON with the .proto field names.
void PrintJson(const google::protobuf::Message& message);
// Prints a job (human form or JSON).
void PrintJob(const v1::Job& job, bool json);
std::string StateName(v1::JobState state);

// Streams WatchJob with a live progress bar until the job ends; returns the final job.
// Exit code: 0 if SUCCEEDED, 1 otherwise.
int WatchUntilDone(v1::JobService::Stub& stub, const std::string& id, bool json);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_CLIENT_H_
