#include "clients/cli/args.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace lockstep::cli {

Args::Args(int argc, char** argv, int start) {
  for (int i = start; i < argc; ++i) args_.emplace_back(argv[i]);
  used_.assign(args_.size(), false);
}

bool Args::Flag(const std::string& name) {
  const std::string opt = name.size() == 1 ? "-" + name : "--" + name;  // -f, --follow
  for (size_t i = 0; i < args_.size(); ++i) {
    if (!used_[i] && args_[i] == opt) return used_[i] = true;
  }
  return false;
}

std::string Args::Value(const std::string& name, const std::string& fallback) {
  const std::string opt = name.size() == 1 ? "-" + name : "--" + name;  // -o, --output
  for (size_t i = 0; i < args_.size(); ++i) {
    if (used_[i]) continue;
    if (args_[i] == opt && i + 1 < args_.size()) {
      used_[i] = used_[i + 1] = true;
      return args_[i + 1];
    }
    if (args_[i].rfind(opt + "=", 0) == 0) {
      used_[i] = true;
      return args_[i].substr(opt.size() + 1);
    }
  }
  return fallback;
}

std::vector<std::string> Args::Positional() {
  std::vector<std::string> out;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (!used_[i] && args_[i].rfind("--", 0) != 0) {
      used_[i] = true;
      out.push_back(args_[i]);
    }
  }
  return out;
}

bool Args::Done() {
  for (size_t i = 0; i < args_.size(); ++i) {
    if (!used_[i]) {
      absl::FPrintF(stderr, "error: unknown option %s\n", args_[i]);
      return false;
    }
  }
  return true;
}

int Fail(const absl::Status& status) {
  absl::FPrintF(stderr, "error: %s: %s\n", absl::StatusCodeToString(status.code()),
                status.message());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

absl::StatusOr<int> ParseInt(const std::string& name, const std::string& text) {
  int v;
  if (!absl::SimpleAtoi(text, &v)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s: \"%s\" is not an integer", name, text));
  }
  return v;
}

absl::StatusOr<double> ParseDouble(const std::string& name, const std::string& text) {
  double v;
  if (!absl::SimpleAtod(text, &v)) {
    return absl::InvalidArgumentError(absl::StrFormat("--%s: \"%s\" is not a number", name, text));
  }
  return v;
}

}  // namespace lockstep::cli
