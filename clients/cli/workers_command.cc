// `lockstep workers revoke ID`: revokes a worker's identity (WorkerAdmin.RevokeWorker, for
// admins): the coordinator refuses its certificate from then on, also after a restart, and
// the job it ran recovers on other workers.
#include <cstdio>
#include <memory>

#include "absl/strings/str_format.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"
#include "clients/cli/terminal_text.h"
#include "lockstep/v1/registry.grpc.pb.h"
#include "services/common/rpc/status.h"

namespace lockstep::cli {
namespace {

struct RevokeOptions {
  ConnectionOptions connection;
  std::string id;
};

int Revoke(const RevokeOptions& o) {
  const absl::StatusOr<Connection> conn = ResolveConnection(o.connection);
  if (!conn.ok()) return Fail(conn.status());
  auto stub = v1::WorkerAdmin::NewStub(
      MakeChannel(conn->address, conn->transport, kCoordinatorIdentity, conn->token));
  auto ctx = Deadline(30);
  v1::RevokeWorkerRequest req;
  req.set_id(o.id);
  v1::RevokeWorkerResponse resp;
  if (grpc::Status st = stub->RevokeWorker(ctx.get(), req, &resp); !st.ok()) {
    return Fail(*conn, st);
  }
  absl::PrintF("revoked worker identity %s: its certificate is refused from now on\n",
               Printable(resp.identity()));
  return 0;
}

}  // namespace

void AddWorkersRevokeCommand(CLI::App& workers, Commands& out) {
  auto o = std::make_shared<RevokeOptions>();
  CLI::App* sub = workers.add_subcommand(
      "revoke", "revoke a worker's identity for good (admins): its job recovers elsewhere");
  AddConnectionOptions(*sub, o->connection);
  sub->add_option("ID", o->id, "a worker id (from `lockstep workers`) or a worker identity")
      ->required();
  out.push_back({sub, [o] { return Revoke(*o); }});
}

}  // namespace lockstep::cli
