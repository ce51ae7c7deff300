// The dashboard API's one mapping from absl::Status to an HTTP answer: the status code
// (as grpc-gateway maps gRPC codes) and the JSON error body, v1.ApiError.
#ifndef LOCKSTEP_SERVICES_DASHBOARD_HTTP_STATUS_H_
#define LOCKSTEP_SERVICES_DASHBOARD_HTTP_STATUS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace lockstep {

// One HTTP answer: status code, content type, body and extra headers.
struct HttpReply {
  int code = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// OK 200; INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE 400; UNAUTHENTICATED 401;
// PERMISSION_DENIED 403; NOT_FOUND 404; ALREADY_EXISTS, ABORTED 409; RESOURCE_EXHAUSTED
// 429; CANCELLED 499; UNIMPLEMENTED 501; UNAVAILABLE 503; DEADLINE_EXCEEDED 504; the
// others (INTERNAL, UNKNOWN, DATA_LOSS) 500.
int HttpCodeOf(absl::StatusCode code);

// The answer for a failed `status` (not OK): its code, {"code": NAME, "message": ...},
// and for UNAUTHENTICATED the header WWW-Authenticate: Bearer.
HttpReply ErrorReply(const absl::Status& status);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_DASHBOARD_HTTP_STATUS_H_
