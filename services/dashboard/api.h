// DashboardApi: the dashboard's JSON API, a thin layer over the plain classes the gRPC
// service uses (JobManager, WorkerPool, Guard), with the same tokens and roles: users see
// and touch their own jobs, admins everything, and only admins list every worker. Its
// answers are the job API's messages (and dashboard.proto's) in protobuf JSON with
// snake_case names; errors map to HTTP in one place (http_status.h). docs/dashboard.md
// lists the routes with curl examples:
//
//   GET  /api/v1/whoami
//   GET  /api/v1/jobs?state=RUNNING,QUEUED&owner=NAME&name=TEXT&limit=N
//   GET  /api/v1/jobs/ID
//   GET  /api/v1/jobs/ID/history?from_step=N      step and evaluation events
//   GET  /api/v1/jobs/ID/events                   state events (recoveries, failures)
//   GET  /api/v1/jobs/ID/logs?tail=N              log lines, oldest first
//   GET  /api/v1/jobs/ID/witness                  params checksums at snapshots and the end
//   GET  /api/v1/jobs/ID/workers                  the job's workers, rank order
//   POST /api/v1/jobs/ID/cancel
//   GET  /api/v1/workers                          admins only
//
// No network here: the HTTP server (server.h) hands each request to Handle. Thread-safe
// (it only reads its members; the classes it calls are thread-safe).
#ifndef LOCKSTEP_SERVICES_DASHBOARD_API_H_
#define LOCKSTEP_SERVICES_DASHBOARD_API_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "services/common/security/auth.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/workers/worker_pool.h"
#include "services/dashboard/http_status.h"

namespace lockstep {

// One request, as the server parsed it: the query's values URL-decoded.
struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query
  std::map<std::string, std::string> query;
  std::string authorization;  // the Authorization header; empty when absent
  std::string host, origin;   // the Host and Origin headers; empty when absent
};

class DashboardApi {
 public:
  // All must outlive the API.
  DashboardApi(JobManager* jobs, WorkerPool* pool, const Guard* guard)
      : jobs_(jobs), pool_(pool), guard_(guard) {}

  // The answer to a request whose path starts with /api/: 200 with JSON, 405 for a known
  // route with another method, else ErrorReply of the status: UNAUTHENTICATED without a
  // known token, PERMISSION_DENIED for another user's job or the workers list,
  // NOT_FOUND for an unknown job or route, INVALID_ARGUMENT naming a bad query parameter,
  // FAILED_PRECONDITION when cancelling a job that ended.
  HttpReply Handle(const HttpRequest& request) const;

 private:
  // The JSON body for /api/v1/<collection>[/<id>[/<what>]], or why not.
  absl::StatusOr<std::string> Route(const std::string& collection, const std::string& id,
                                    const std::string& what, const HttpRequest& request,
                                    const Principal& who) const;
  absl::StatusOr<std::string> ListJobs(const HttpRequest& request, const Principal& who) const;
  absl::StatusOr<std::string> JobRoute(const std::string& id, const std::string& what,
                                       const HttpRequest& request, const Principal& who) const;
  absl::StatusOr<std::string> History(const std::string& id, const HttpRequest& request) const;
  absl::StatusOr<std::string> Events(const std::string& id) const;
  absl::StatusOr<std::string> Logs(const std::string& id, const HttpRequest& request) const;
  absl::StatusOr<std::string> JobWorkers(const v1::Job& job) const;
  absl::StatusOr<std::string> Workers(const Principal& who) const;

  JobManager* jobs_;
  WorkerPool* pool_;
  const Guard* guard_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_DASHBOARD_API_H_
