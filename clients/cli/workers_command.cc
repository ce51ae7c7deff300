// `lockstep workers revoke ID`: revokes a worker's identity or one certificate
// (WorkerAdmin.RevokeWorker, for admins): the coordinator refuses it from then on, also
// after a restart, and the job it ran recovers on other workers. `lockstep workers revoked`
// lists what is revoked; `lockstep workers approve ID` lets a worker that enrolled with the
// bootstrap token take jobs (WorkerAdmin.ApproveWorker).
#include <cstdio>
#include <memory>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"
#include "clients/cli/terminal_text.h"
#include "lockstep/v1/job.grpc.pb.h"
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
  // What it did, no more: a name no worker holds now is revoked all the same.
  if (resp.dropped_workers().empty()) {
    absl::PrintF("revoked %s: no worker of it is registered now; it is refused from now on\n",
                 Printable(resp.identity()));
  } else {
    absl::PrintF(
        "revoked %s: dropped worker %s (its job recovers elsewhere); refused from now on\n",
        Printable(resp.identity()), Printable(absl::StrJoin(resp.dropped_workers(), ", ")));
  }
  return 0;
}

int Approve(const RevokeOptions& o) {
  const absl::StatusOr<Connection> conn = ResolveConnection(o.connection);
  if (!conn.ok()) return Fail(conn.status());
  auto stub = v1::WorkerAdmin::NewStub(
      MakeChannel(conn->address, conn->transport, kCoordinatorIdentity, conn->token));
  auto ctx = Deadline(30);
  v1::ApproveWorkerRequest req;
  req.set_id(o.id);
  v1::ApproveWorkerResponse resp;
  if (grpc::Status st = stub->ApproveWorker(ctx.get(), req, &resp); !st.ok()) {
    return Fail(*conn, st);
  }
  absl::PrintF("approved worker identity %s: it takes jobs from now on\n",
               Printable(resp.identity()));
  return 0;
}

int ListRevoked(const ConnectionOptions& connection) {
  const absl::StatusOr<Connection> conn = ResolveConnection(connection);
  if (!conn.ok()) return Fail(conn.status());
  auto stub = v1::JobService::NewStub(
      MakeChannel(conn->address, conn->transport, kCoordinatorIdentity, conn->token));
  auto ctx = Deadline(30);
  v1::ListWorkersResponse resp;
  if (grpc::Status st = stub->ListWorkers(ctx.get(), v1::ListWorkersRequest(), &resp); !st.ok()) {
    return Fail(*conn, st);
  }
  if (resp.revoked().empty()) absl::PrintF("nothing is revoked\n");
  for (const std::string& r : resp.revoked()) absl::PrintF("%s\n", Printable(r));
  return 0;
}

}  // namespace

void AddWorkersRevokeCommand(CLI::App& workers, Commands& out) {
  auto o = std::make_shared<RevokeOptions>();
  CLI::App* sub = workers.add_subcommand(
      "revoke", "revoke a worker's identity for good (admins): its job recovers elsewhere");
  AddConnectionOptions(*sub, o->connection);
  sub->add_option("ID", o->id,
                  "a worker id (from `lockstep workers`), a worker identity (NAME or "
                  "lockstep-worker/NAME), or one certificate's SHA-256 fingerprint")
      ->required();
  out.push_back({sub, [o] { return Revoke(*o); }});
  auto approve = std::make_shared<RevokeOptions>();
  CLI::App* approve_app = workers.add_subcommand(
      "approve", "approve a worker that enrolled with the bootstrap token (admins): it takes jobs");
  AddConnectionOptions(*approve_app, approve->connection);
  approve_app
      ->add_option("ID", approve->id, "a worker id (from `lockstep workers`) or its identity")
      ->required();
  out.push_back({approve_app, [approve] { return Approve(*approve); }});
  auto connection = std::make_shared<ConnectionOptions>();
  CLI::App* list = workers.add_subcommand(
      "revoked", "list the revoked worker identities and certificate fingerprints (admins)");
  AddConnectionOptions(*list, *connection);
  out.push_back({list, [connection] { return ListRevoked(*connection); }});
}

}  // namespace lockstep::cli
