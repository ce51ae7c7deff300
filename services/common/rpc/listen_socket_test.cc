// Tests of listen_socket.h and of the gRPC servers' ports: a port is one server's alone
// (no SO_REUSEPORT), and a taken one is an error naming it while the first keeps serving.
#include "services/common/rpc/listen_socket.h"

#include <sys/socket.h>
#include <unistd.h>

#include "core/testing.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "lockstep/v1/registry.grpc.pb.h"
#include "services/common/rpc/net.h"

namespace lockstep::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

bool HealthServing(int port) {
  auto stub = grpc::health::v1::Health::NewStub(
      MakeChannel(absl::StrCat("127.0.0.1:", port), Transport::Plaintext(), ""));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::health::v1::HealthCheckResponse resp;
  return stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp).ok() &&
         resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

TEST(ListenSocketTest, ASecondGrpcServerOnATakenPortFailsNamingItAndTheFirstServesOn) {
  v1::Rendezvous::Service unimplemented;  // a server needs a service
  ASSERT_OK_AND_ASSIGN(Serving first,
                       StartServer("127.0.0.1:0", Transport::Plaintext(), {&unimplemented}, ""));
  const std::string address = absl::StrCat("127.0.0.1:", first.port);
  // With gRPC's default SO_REUSEPORT the second one started and shared the port.
  EXPECT_THAT(StartServer(address, Transport::Plaintext(), {&unimplemented}, ""),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr(address),
                             HasSubstr(absl::StrCat("port ", first.port, " is in use")))));
  EXPECT_THAT(CheckPortFree("--listen", address),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("--listen")));
  // Also on the wildcard address, which covers loopback.
  EXPECT_THAT(CheckPortFree("--listen", absl::StrCat("0.0.0.0:", first.port)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("is in use")));
  EXPECT_TRUE(HealthServing(first.port));
  first.server->Shutdown();
}

TEST(ListenSocketTest, ListenTcpLeavesReusePortOffAndPortZeroIsAlwaysFree) {
  ASSERT_OK_AND_ASSIGN(int fd, ListenTcp("test", "127.0.0.1:0", 4));
  int reuse_port = -1;
  socklen_t len = sizeof(reuse_port);
  ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &reuse_port, &len), 0);
  EXPECT_EQ(reuse_port, 0);
  const int port = BoundPort(fd);
  EXPECT_GT(port, 0);
  EXPECT_THAT(ListenTcp("metrics", absl::StrCat("127.0.0.1:", port), 4),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("metrics"), HasSubstr(absl::StrCat("port ", port)))));
  EXPECT_OK(CheckPortFree("test", "127.0.0.1:0"));
  EXPECT_OK(CheckPortsFree({{"--metrics_listen", ""}}));  // off: nothing to check
  EXPECT_THAT(CheckPortsFree({{"--listen", "127.0.0.1:0"},
                              {"--metrics_listen", absl::StrCat("127.0.0.1:", port)}}),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("--metrics_listen")));
  close(fd);
  EXPECT_OK(CheckPortFree("test", absl::StrCat("127.0.0.1:", port)));
  EXPECT_THAT(ListenTcp("test", "127.0.0.1", 4),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host:port")));
}

}  // namespace
}  // namespace lockstep::testing
