// Argument handling shared by the CLI's programs (`lockstep`, `lockstep-train`), on CLI11, and how
// they report an error. Contract: args.h.
#include "clients/cli/args.h"

#include <algorithm>
#include <iostream>
#include <limits>
#include <sstream>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/cli/terminal_text.h"

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

// The subcommands of `app`, hidden ones included.
std::vector<const CLI::App*> Subcommands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

const CLI::App* FindSubcommand(const CLI::App& app, const std::string& word) {
  for (const CLI::App* sub : Subcommands(app)) {
    if (sub->check_name(word)) return sub;
  }
  return nullptr;
}

// The option `name` ("--data-root", "-o") of `app` or of any command below it.
const CLI::Option* FindOptionInTree(const CLI::App& app, const std::string& name) {
  if (const CLI::Option* o = app.get_option_no_throw(name)) return o;
  for (const CLI::App* sub : Subcommands(app)) {
    if (const CLI::Option* o = FindOptionInTree(*sub, name)) return o;
  }
  return nullptr;
}

// How many letters to insert, delete, change or swap with the next to make `a` into `b`
// (optimal string alignment: "lsit" is one swap from "list").
size_t Distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1] ? 1 : 0)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The one of `candidates` closest to `word` when it is close (a typo, not another word):
// at most 2 edits and fewer than half its letters, or `word` a prefix of it.
std::string Closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const std::string& c : candidates) {
    const size_t d = c.starts_with(word) && word.size() >= 3 ? 1 : Distance(word, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best_distance <= 2 && best_distance * 2 < word.size() ? best : "";
}

}  // namespace

std::vector<std::string> NormalizeArgs(const CLI::App& app, const std::vector<std::string>& args,
                                       std::vector<std::string>* notes) {
  std::vector<std::string> path, moved, rest;
  const CLI::App* at = &app;
  size_t i = 0;
  bool separated = false;  // after "--", or in the arguments of a prefix command (`train`)
  const auto dashed = [&](const std::string& arg) {
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    if (separated || !name.starts_with("--") || name.find('_') == std::string::npos ||
        FindOptionInTree(app, name) != nullptr) {
      return arg;
    }
    std::string with_dashes = name;
    std::replace(with_dashes.begin() + 2, with_dashes.end(), '_', '-');
    if (FindOptionInTree(app, with_dashes) == nullptr) return arg;
    notes->push_back(absl::StrCat(name, " is deprecated: use ", with_dashes));
    return eq == std::string::npos ? with_dashes : with_dashes + arg.substr(eq);
  };
  // Options before the deepest subcommand move after it: `lockstep --dir D list` is
  // `lockstep list --dir D`, as kubectl takes its global flags anywhere.
  for (; i < args.size(); ++i) {
    const std::string arg = dashed(args[i]);
    if (arg == "--") break;
    if (arg.size() > 1 && arg[0] == '-') {
      moved.push_back(arg);
      const CLI::Option* o = FindOptionInTree(app, arg.substr(0, arg.find('=')));
      if (o != nullptr && o->get_items_expected_max() > 0 && arg.find('=') == std::string::npos &&
          i + 1 < args.size()) {
        moved.push_back(args[++i]);
      }
      continue;
    }
    const CLI::App* sub = FindSubcommand(*at, arg);
    if (sub == nullptr) break;
    path.push_back(arg);
    at = sub;
    if (sub->get_prefix_command()) {
      ++i;
      separated = true;
      break;
    }
  }
  for (; i < args.size(); ++i) {
    if (args[i] == "--") separated = true;
    rest.push_back(dashed(args[i]));
  }
  std::vector<std::string> out = path;
  out.insert(out.end(), moved.begin(), moved.end());
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

namespace {

// For a usage error: "did you mean ...?" for the first word of `args` (normalized) that
// is neither a subcommand nor an option of the command it follows but close to one.
std::string Suggestion(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* at = &app;
  for (const std::string& arg : args) {
    if (arg == "--" || at->get_prefix_command()) return "";
    if (const CLI::App* sub = FindSubcommand(*at, arg)) {
      at = sub;
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-') {
      const std::string name = arg.substr(0, arg.find('='));
      if (at->get_option_no_throw(name) != nullptr) continue;
      std::vector<std::string> names;
      for (const CLI::Option* o : at->get_options()) {
        for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
      }
      const std::string best = Closest(name, names);
      return best.empty() ? "" : absl::StrCat(name, ": did you mean ", best, "?");
    }
    // A word where the command takes no arguments but subcommands: a mistyped one.
    if (!Subcommands(*at).empty() &&
        at->get_options([](const CLI::Option* o) { return o->get_positional(); }).empty()) {
      std::vector<std::string> names;
      for (const CLI::App* sub : Subcommands(*at)) names.push_back(sub->get_name());
      const std::string best = Closest(arg, names);
      return best.empty() ? "" : absl::StrCat(arg, ": did you mean ", best, "?");
    }
  }
  return "";
}

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
  std::vector<std::string> notes;
  std::vector<std::string> args =
      NormalizeArgs(app, std::vector<std::string>(argv + std::min(argc, 1), argv + argc), &notes);
  for (const std::string& note : notes) absl::FPrintF(stderr, "note: %s\n", note);
  std::vector<char*> pointers = {argv[0]};
  for (std::string& a : args) pointers.push_back(a.data());
  try {
    app.parse(static_cast<int>(pointers.size()), pointers.data());
    return std::nullopt;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // prints the help of the subcommand that got --help; 0
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string suggestion = Suggestion(app, args);
    absl::FPrintF(stderr, "error: %s\n%srun `%s --help` for its usage\n", e.what(),
                  suggestion.empty() ? "" : suggestion + "\n", CommandPath(app));
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
                Printable(std::string(status.message())));
  return status.code() == absl::StatusCode::kInvalidArgument ? kUsageExitCode : 1;
}

int FailArgumentFile(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kNotFound) return Fail(status);
  return Fail(absl::InvalidArgumentError(status.message()));
}

}  // namespace lockstep::cli
