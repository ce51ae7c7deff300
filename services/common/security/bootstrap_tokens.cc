// Bootstrap tokens, with which new workers enroll: their file, parsed and checked.
// Contract: bootstrap_tokens.h.
#include "services/common/security/bootstrap_tokens.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace lockstep {

absl::StatusOr<std::vector<BootstrapToken>> ParseBootstrapTokens(absl::string_view text,
                                                                 const std::string& source) {
  std::vector<BootstrapToken> out;
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++n;
    line = line.substr(0, line.find('#'));
    const std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (f.empty()) continue;
    const std::string where = absl::StrCat(source, ":", n, ": ");
    if (f[0].size() < 16) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "a bootstrap token has at least 16 characters"));
    }
    BootstrapToken t{std::string(f[0]), std::nullopt};
    for (size_t i = 1; i < f.size(); ++i) {
      absl::Time when;
      std::string err;
      if (!absl::StartsWith(f[i], "expires=") ||
          !absl::ParseTime(absl::RFC3339_full, f[i].substr(8), &when, &err)) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, "expected TOKEN [expires=TIME], TIME as 2027-01-31T00:00:00Z; got \"", f[i],
            "\""));
      }
      t.expires = when;
    }
    out.push_back(std::move(t));
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": no bootstrap token"));
  return out;
}

}  // namespace lockstep
