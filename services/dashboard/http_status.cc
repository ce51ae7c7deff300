// The dashboard API's one mapping from absl::Status to an HTTP answer: the status code (as grpc-
// gateway maps gRPC codes) and the JSON error body, v1.ApiError. Contract: http_status.h.
#include "services/dashboard/http_status.h"

#include <google/protobuf/util/json_util.h>

#include "lockstep/v1/dashboard.pb.h"

namespace lockstep {

int HttpCodeOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

HttpReply ErrorReply(const absl::Status& status) {
  v1::ApiError error;
  error.set_code(absl::StatusCodeToString(status.code()));
  error.set_message(std::string(status.message()));
  HttpReply reply;
  reply.code = HttpCodeOf(status.code());
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(error, &reply.body, opts);
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    reply.headers.emplace_back("WWW-Authenticate", "Bearer");
  }
  return reply;
}

}  // namespace lockstep
