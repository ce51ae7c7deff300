// `lockstep health [ADDRESS]`: asks a server's gRPC health service whether it is
// SERVING; exit 0 if so. For container health checks and scripts.
#include "absl/strings/str_format.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "services/common/net.h"
#include "services/common/status.h"

namespace lockstep::cli {

int HealthCommand(Args& args) {
  const std::string timeout = args.Value("timeout", "3");
  // Which certificate the server must show: the coordinator's, or a worker's.
  const std::string server_name = args.Value("server_name", kCoordinatorIdentity);
  const absl::StatusOr<Connection> conn = ResolveConnection(args);
  auto pos = args.Positional();
  if (!args.Done() || pos.size() > 1) {
    absl::FPrintF(stderr,
                  "usage: lockstep health [HOST:PORT] [--timeout SECONDS] [--server_name NAME]\n");
    return 2;
  }
  auto seconds = ParseDouble("timeout", timeout);
  if (!seconds.ok()) return Fail(seconds.status());
  if (!conn.ok()) return Fail(conn.status());
  const std::string address = pos.empty() ? conn->address : pos[0];
  auto stub = grpc::health::v1::Health::NewStub(MakeChannel(address, conn->transport, server_name));
  auto ctx = Deadline(*seconds);
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status st = stub->Check(ctx.get(), req, &resp);
  if (!st.ok()) return Fail(FromGrpcStatus(st));
  absl::PrintF("%s: %s\n", address,
               grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()));
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

}  // namespace lockstep::cli
