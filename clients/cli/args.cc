// Argument handling shared by the CLI's programs (`lockstep`, `lockstep-train`), on CLI11, and how
// they report an error. Contract: args.h.
#include "clients/cli/args.h"

#include <iostream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

#ifndef LOCKSTEP_VERSION
#define LOCKSTEP_VERSION "unknown"
#endif

namespace lockstep::cli {

std::string Version() { return LOCKSTEP_VERSION; }

std::unique_ptr<CLI::App> NewApp(const std::string& description, const std::string& name) {
  auto app = std::make_unique<CLI::App>(description, name);
  app->set_version_flag("--version", Version(), "print the version and exit");
  app->option_defaults()->always_capture_default();
  app->get_formatter()->column_width(34);
  return app;
}

namespace {

// "lockstep cluster up": the command line's deepest subcommand that was parsed.
std::string CommandPath(const CLI::App& app) {
  std::string path = app.get_name();
  for (const CLI::App* at = &app;;) {
    const std::vector<CLI::App*> subs = at->get_subcommands();
    if (subs.empty()) return path;
    at = subs.front();
    path += " " + at->get_name();
  }
}

}  // namespace

std::optional<int> Parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // prints the help of the subcommand that got --help; 0
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    absl::FPrintF(stderr, "error: %s\nrun `%s --help` for its usage\n", e.what(), CommandPath(app));
    return kUsageExitCode;
  }
}

CLI::Validator AtLeast(double min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        double v;
        if (absl::SimpleAtod(text, &v) && v >= min) return "";
        return absl::StrFormat("must be a number >= %g, not \"%s\"", min, text);
      },
      absl::StrFormat(">=%g", min));
}

absl::Duration ParseDurationArg(const std::string& text) {
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) return absl::Seconds(seconds);
  absl::Duration d;
  return absl::ParseDuration(text, &d) ? d : absl::ZeroDuration();
}

CLI::Validator DurationArg() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (ParseDurationArg(text) > absl::ZeroDuration()) return "";
        return absl::StrFormat("must be a duration such as 90s, 5m or 1h30m, not \"%s\"", text);
      },
      "DURATION");
}

int Fail(const absl::Status& status) {
  absl::FPrintF(stderr, "error: %s: %s\n", absl::StatusCodeToString(status.code()),
                status.message());
  return status.code() == absl::StatusCode::kInvalidArgument ? kUsageExitCode : 1;
}

}  // namespace lockstep::cli
