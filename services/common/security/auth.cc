// Who may call what: bearer tokens for job API clients, certificates for the coordinator and the
// workers. Contract: auth.h.
#include "services/common/security/auth.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "services/common/rpc/net.h"

namespace lockstep {
namespace {

std::array<unsigned char, 32> Digest(absl::string_view token) {
  std::array<unsigned char, 32> d;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), d.data());
  return d;
}

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '@' && c != '-') return false;
  }
  return true;
}

// The certificate names gRPC verified for this call (`properties`: CN, DNS names); none if
// the caller presented no certificate.
std::vector<std::string> PeerNames(const grpc::ServerContextBase& ctx,
                                   std::vector<const char*> properties = {
                                       GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME}) {
  std::vector<std::string> names;
  const auto auth = ctx.auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) return names;
  for (const char* property : properties) {
    for (const auto& v : auth->FindPropertyValues(property)) names.emplace_back(v.data(), v.size());
  }
  return names;
}

absl::string_view Authorization(const grpc::ServerContextBase& ctx) {
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  return it == md.end() ? absl::string_view()
                        : absl::string_view(it->second.data(), it->second.size());
}

// Parses "KEY=VALUE" into `limits`; INVALID_ARGUMENT (after `where`) when the key is not a
// limit's, the value not a non-negative integer, or the name's limit already set otherwise.
absl::Status ParseLimit(absl::string_view field, const std::string& where, CallerLimits* limits) {
  const size_t eq = field.find('=');
  const absl::string_view key = field.substr(0, eq);
  std::optional<int64_t>* slot = key == "max_queued_jobs"      ? &limits->max_queued_jobs
                                 : key == "max_running_jobs"   ? &limits->max_running_jobs
                                 : key == "submits_per_minute" ? &limits->submits_per_minute
                                 : key == "max_jobs_kept"      ? &limits->max_jobs_kept
                                                               : nullptr;
  if (eq == absl::string_view::npos || slot == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(where,
                     "expected KEY=VALUE after the role, KEY one of max_queued_jobs, "
                     "max_running_jobs, submits_per_minute, max_jobs_kept; got \"",
                     field, "\""));
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(field.substr(eq + 1), &value) || value < 0 || value > (1 << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, key, ": expected a non-negative integer, got \"", field.substr(eq + 1), "\""));
  }
  if (slot->has_value() && **slot != value) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, key, "=", value, " but it was given as ", **slot));
  }
  *slot = value;
  return absl::OkStatus();
}

}  // namespace

bool ValidWorkerName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1) {
    std::abort();  // no entropy: nothing secure can be made
  }
  return absl::BytesToHexString(raw);
}

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text, const std::string& source) {
  TokenTable t;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (f.empty()) continue;
    const std::string where = absl::StrCat(source, ":", line_number, ": ");
    if (f.size() < 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "expected TOKEN NAME ROLE [KEY=VALUE ...]"));
    }
    if (f[0].size() < 16) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the token is shorter than 16 characters"));
    }
    if (!ValidName(f[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the name must be 1 to 64 characters of [A-Za-z0-9._@-]"));
    }
    if (f[2] != "user" && f[2] != "admin") {
      return absl::InvalidArgumentError(absl::StrCat(where, "the role must be user or admin"));
    }
    Entry e{Digest(f[0]), Principal{std::string(f[1]), f[2] == "admin"}};
    for (const Entry& other : t.entries_) {
      if (other.digest == e.digest) {
        return absl::InvalidArgumentError(absl::StrCat(where, "this token is given twice"));
      }
    }
    Caller& caller = t.callers_[e.who.name];
    caller.admin = caller.admin && e.who.admin;
    for (size_t i = 3; i < f.size(); ++i) {
      if (absl::Status st = ParseLimit(f[i], where, &caller.limits); !st.ok()) return st;
    }
    t.entries_.push_back(std::move(e));
  }
  return t;
}

absl::StatusOr<TokenTable> TokenTable::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--tokens_file: cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path);
}

absl::StatusOr<Principal> TokenTable::Find(absl::string_view token) const {
  const auto d = Digest(token);
  const Entry* found = nullptr;
  for (const Entry& e : entries_) {  // no early exit: the time says nothing about the table
    if (CRYPTO_memcmp(e.digest.data(), d.data(), d.size()) == 0) found = &e;
  }
  if (found == nullptr) return absl::UnauthenticatedError("unknown token");
  return found->who;
}

absl::StatusOr<Principal> Guard::Client(absl::string_view authorization,
                                        const std::vector<std::string>& peer_names) const {
  if (!secure_) return Principal{"anonymous", true};
  if (!peer_names.empty()) {
    return absl::PermissionDeniedError("the job API takes tokens, not cluster certificates");
  }
  constexpr absl::string_view kBearer = "Bearer ";
  if (authorization.substr(0, kBearer.size()) != kBearer) {
    return absl::UnauthenticatedError(
        "a bearer token is required (the CLI's --token_file, the Python client's token=)");
  }
  return tokens_.Find(authorization.substr(kBearer.size()));
}

absl::Status Guard::Peer(const std::vector<std::string>& peer_names,
                         absl::string_view identity) const {
  if (!secure_) return absl::OkStatus();
  if (peer_names.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat("only a holder of the cluster's ", identity, " certificate may call this"));
  }
  for (const std::string& n : peer_names) {
    if (n == identity) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat("only the cluster's ", identity, " may call this"));
}

absl::StatusOr<std::string> Guard::Worker(const std::vector<std::string>& peer_names,
                                          const std::vector<std::string>& common_names) const {
  if (!secure_) return std::string();
  if (absl::Status st = Peer(peer_names, kWorkerIdentity); !st.ok()) return st;
  for (const std::string& cn : common_names) {
    if (!absl::StartsWith(cn, kWorkerCnPrefix)) continue;
    const std::string name = cn.substr(sizeof(kWorkerCnPrefix) - 1);
    if (ValidWorkerName(name)) return name;
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "this worker certificate names no worker of its own (its CN is not ", kWorkerCnPrefix,
      "NAME): give each worker its own, `lockstep certs --workers NAME,...`"));
}

absl::StatusOr<std::string> Guard::Worker(const grpc::ServerContextBase& ctx) const {
  return Worker(PeerNames(ctx), PeerNames(ctx, {GRPC_X509_CN_PROPERTY_NAME}));
}

absl::StatusOr<Principal> Guard::Client(const grpc::ServerContextBase& ctx) const {
  return Client(Authorization(ctx), PeerNames(ctx));
}

absl::Status Guard::Peer(const grpc::ServerContextBase& ctx, absl::string_view identity) const {
  return Peer(PeerNames(ctx), identity);
}

}  // namespace lockstep
