// `lockstep health [ADDRESS]`: asks a server's gRPC health service whether it is
// SERVING; exit 0 if so. For container health checks and scripts.
#include <memory>

#include "absl/strings/str_format.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "services/common/rpc/net.h"
#include "services/common/rpc/status.h"

namespace lockstep::cli {
namespace {

struct HealthOptions {
  ConnectionOptions connection;
  std::string address;  // else the coordinator's
  double timeout = 3;
  // Which certificate the server must show: the coordinator's, or a worker's.
  std::string server_name = kCoordinatorIdentity;
};

int Health(const HealthOptions& o) {
  const absl::StatusOr<Connection> conn = ResolveConnection(o.connection);
  if (!conn.ok()) return Fail(conn.status());
  const std::string address = o.address.empty() ? conn->address : o.address;
  auto stub =
      grpc::health::v1::Health::NewStub(MakeChannel(address, conn->transport, o.server_name));
  auto ctx = Deadline(o.timeout);
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status st = stub->Check(ctx.get(), req, &resp);
  if (!st.ok()) return Fail(FromGrpcStatus(st));
  absl::PrintF("%s: %s\n", address,
               grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()));
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

}  // namespace

void AddHealthCommand(CLI::App& app, Commands& out) {
  auto o = std::make_shared<HealthOptions>();
  CLI::App* sub =
      app.add_subcommand("health", "exit 0 if the server's gRPC health service is SERVING");
  AddConnectionOptions(*sub, o->connection);
  sub->add_option("HOST:PORT", o->address, "the server (default: the coordinator)");
  sub->add_option("--timeout", o->timeout, "seconds to wait for the answer")->check(AtLeast(0));
  sub->add_option("--server-name", o->server_name,
                  "the identity its certificate must show: lockstep-coordinator or "
                  "lockstep-worker");
  out.push_back({sub, [o] { return Health(*o); }});
}

}  // namespace lockstep::cli
