// Who may call what. Job API clients prove themselves with a bearer token from the
// coordinator's tokens file; the coordinator and the workers with their certificates
// (mutual TLS, services/common/rpc/net.h). A token never registers a worker and a
// certificate never reaches the job API: each handler asks for the one kind it accepts.
//
// The tokens file, one caller per line ("#" starts a comment):
//   TOKEN NAME ROLE [KEY=VALUE ...]   ROLE: user (their own jobs) or admin (everything)
// The optional KEY=VALUE fields are the caller's own limits (CallerLimits: max_queued_jobs,
// max_running_jobs, submits_per_minute, max_jobs_kept), which replace the coordinator's
// per-user defaults for that name (services/coordinator/scheduling/user_limits.h).
// Tokens are kept only as SHA-256 digests and compared in constant time; they are never
// logged.
#ifndef LOCKSTEP_SERVICES_COMMON_SECURITY_AUTH_H_
#define LOCKSTEP_SERVICES_COMMON_SECURITY_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

// A job API caller.
struct Principal {
  std::string name;
  bool admin = false;
};

// A name's own limits from the tokens file; an unset one takes the coordinator's default.
// Each is a non-negative integer; what 0 means is the coordinator's (user_limits.h).
struct CallerLimits {
  std::optional<int64_t> max_queued_jobs;
  std::optional<int64_t> max_running_jobs;
  std::optional<int64_t> submits_per_minute;
  std::optional<int64_t> max_jobs_kept;
  bool any() const {
    return max_queued_jobs || max_running_jobs || submits_per_minute || max_jobs_kept;
  }
};

// What the tokens file says about one name, over all of its lines.
struct Caller {
  bool admin = true;  // every token of the name is an admin's
  CallerLimits limits;
};

class TokenTable {
 public:
  TokenTable() = default;
  // INVALID_ARGUMENT naming `source` and the line: a bad role, a token shorter than 16
  // characters, a name with characters other than [A-Za-z0-9._@-], a token given twice, an
  // unknown KEY or a VALUE that is not a non-negative integer, or a limit that another
  // line of the same name gives another value.
  static absl::StatusOr<TokenTable> Parse(absl::string_view text, const std::string& source);
  static absl::StatusOr<TokenTable> Load(const std::string& path);

  // The caller holding `token`; UNAUTHENTICATED if none. Every entry is compared, in
  // constant time, whatever matches.
  absl::StatusOr<Principal> Find(absl::string_view token) const;
  size_t size() const { return entries_.size(); }
  // Every name in the file, with its role and limits.
  const std::map<std::string, Caller>& callers() const { return callers_; }

 private:
  struct Entry {
    std::array<unsigned char, 32> digest;
    Principal who;
  };
  std::vector<Entry> entries_;
  std::map<std::string, Caller> callers_;
};

// A worker's own identity is in its certificate's CN: "lockstep-worker/NAME" (the DNS name
// stays lockstep-worker, which the coordinator checks when it calls the worker). A
// certificate whose CN is the bare role (the shared worker.pem of older clusters) names no
// worker and is refused by the registry and the rendezvous.
inline constexpr char kWorkerCnPrefix[] = "lockstep-worker/";
// 1 to 64 characters of [A-Za-z0-9._-]: a worker name that may follow kWorkerCnPrefix.
bool ValidWorkerName(absl::string_view name);

// Random bytes as lowercase hex, from the system's CSPRNG (tokens, unguessable ids).
std::string RandomHex(size_t bytes);

class Guard {
 public:
  // Plaintext (--insecure): nobody is checked and every client is an admin called
  // "anonymous". Development on loopback only.
  static Guard Open() { return Guard(false, TokenTable()); }
  // TLS: clients need a token from `tokens`, peers a certificate from the cluster's CA.
  static Guard Tls(TokenTable tokens) { return Guard(true, std::move(tokens)); }

  // A job API caller: UNAUTHENTICATED without a known bearer token; PERMISSION_DENIED for
  // a caller presenting a cluster certificate (the coordinator's and workers' identities
  // are not users).
  absl::StatusOr<Principal> Client(const grpc::ServerContextBase& ctx) const;
  // A peer holding the certificate named `identity`: UNAUTHENTICATED without a
  // certificate, PERMISSION_DENIED with another one.
  absl::Status Peer(const grpc::ServerContextBase& ctx, absl::string_view identity) const;
  // A worker calling with its own certificate: the NAME of its CN "lockstep-worker/NAME".
  // Peer's errors for a caller without the worker role; PERMISSION_DENIED for a worker
  // certificate that names no worker (the shared one). Plaintext: "" (nobody is checked).
  absl::StatusOr<std::string> Worker(const grpc::ServerContextBase& ctx) const;

  // The same decisions from the call's parts (for tests): the "authorization" header (empty
  // if none) and the names in the caller's verified certificate (empty if none).
  absl::StatusOr<Principal> Client(absl::string_view authorization,
                                   const std::vector<std::string>& peer_names) const;
  absl::Status Peer(const std::vector<std::string>& peer_names, absl::string_view identity) const;
  // `common_names`: the CNs of the caller's verified certificate.
  absl::StatusOr<std::string> Worker(const std::vector<std::string>& peer_names,
                                     const std::vector<std::string>& common_names) const;

 private:
  Guard(bool secure, TokenTable tokens) : secure_(secure), tokens_(std::move(tokens)) {}
  bool secure_;
  TokenTable tokens_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_SECURITY_AUTH_H_
