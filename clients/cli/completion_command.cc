// `lockstep completion bash|zsh|fish`: a shell completion script for the CLI, made from its
// own parser (every command, subcommand and option), so that it never falls behind; a JOB
// argument completes with the ids of the jobs `lockstep list -o name` shows.
//   source <(lockstep completion bash)      # or zsh
//   lockstep completion fish | source
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"

namespace lockstep::cli {
namespace {

// One command of the tree: its path ("", "cluster", "cluster up", ...), its subcommands,
// its options' spellings, and whether it takes a JOB argument.
struct CommandWords {
  std::string path;
  std::vector<std::string> subs;
  std::vector<std::string> long_options, short_options;
  bool takes_job = false;
};

void Walk(const CLI::App& app, const std::string& path, std::vector<CommandWords>* out) {
  CommandWords words{path};
  const auto all = [](const CLI::App*) { return true; };
  for (const CLI::App* sub : app.get_subcommands(all)) words.subs.push_back(sub->get_name());
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) words.long_options.push_back(l);
    for (const std::string& s : o->get_snames()) words.short_options.push_back(s);
    if (o->get_positional() && o->get_name() == "JOB") words.takes_job = true;
  }
  out->push_back(words);
  for (const CLI::App* sub : app.get_subcommands(all)) {
    Walk(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), out);
  }
}

std::vector<CommandWords> CommandTree(const CLI::App& app) {
  std::vector<CommandWords> out;
  Walk(app, "", &out);
  return out;
}

std::string BashScript(const CLI::App& app) {
  std::string subs, words, jobs;
  for (const CommandWords& c : CommandTree(app)) {
    std::vector<std::string> all = c.subs;
    for (const std::string& l : c.long_options) all.push_back("--" + l);
    for (const std::string& s : c.short_options) all.push_back("-" + s);
    absl::StrAppendFormat(&subs, "    \"%s\") echo \"%s\" ;;\n", c.path,
                          absl::StrJoin(c.subs, " "));
    absl::StrAppendFormat(&words, "    \"%s\") echo \"%s\" ;;\n", c.path, absl::StrJoin(all, " "));
    if (c.takes_job) absl::StrAppend(&jobs, jobs.empty() ? "" : "|", "\"", c.path, "\"");
  }
  if (jobs.empty()) jobs = "__none__";  // a pattern no command path is
  return absl::StrCat(
      "# lockstep completion (bash): source <(lockstep completion bash)\n"
      "__lockstep_subs() {\n  case \"$1\" in\n",
      subs,
      "  esac\n}\n"
      "__lockstep_words() {\n  case \"$1\" in\n",
      words,
      "  esac\n}\n"
      "_lockstep() {\n"
      "  local path=\"\" w s i cur=${COMP_WORDS[COMP_CWORD]}\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    w=${COMP_WORDS[i]}\n"
      "    for s in $(__lockstep_subs \"$path\"); do\n"
      "      if [[ $w == \"$s\" ]]; then path=\"${path:+$path }$w\"; break; fi\n"
      "    done\n"
      "  done\n"
      "  case \"$path\" in\n"
      "    ",
      jobs,
      ")\n"
      "      if [[ $cur != -* ]]; then  # a JOB: the ids of the jobs this cluster shows\n"
      "        COMPREPLY=($(compgen -W \"$(\"${COMP_WORDS[0]}\" list -o name 2>/dev/null)\" -- "
      "\"$cur\"))\n"
      "        return\n"
      "      fi ;;\n"
      "  esac\n"
      "  COMPREPLY=($(compgen -W \"$(__lockstep_words \"$path\")\" -- \"$cur\"))\n"
      "}\n"
      "complete -o default -F _lockstep lockstep\n");
}

// fish: a function giving the command path typed so far, and `complete` lines per command.
std::string FishScript(const CLI::App& app) {
  const std::vector<CommandWords> commands = CommandTree(app);
  std::string paths, lines;
  for (const CommandWords& c : commands) {
    if (!c.subs.empty()) {
      absl::StrAppendFormat(&paths, "      case '%s'\n        set subs %s\n", c.path,
                            absl::StrJoin(c.subs, " "));
    }
    const std::string when = absl::StrFormat("-n '__lockstep_path_is \"%s\"'", c.path);
    if (!c.subs.empty()) {
      absl::StrAppendFormat(&lines, "complete -c lockstep -f %s -a '%s'\n", when,
                            absl::StrJoin(c.subs, " "));
    }
    for (const std::string& l : c.long_options) {
      absl::StrAppendFormat(&lines, "complete -c lockstep %s -l %s\n", when, l);
    }
    for (const std::string& s : c.short_options) {
      absl::StrAppendFormat(&lines, "complete -c lockstep %s -s %s\n", when, s);
    }
    if (c.takes_job) {
      absl::StrAppendFormat(&lines, "complete -c lockstep -f %s -a '(__lockstep_jobs)'\n", when);
    }
  }
  return absl::StrCat(
      "# lockstep completion (fish): lockstep completion fish | source\n"
      "function __lockstep_path\n"
      "  set -l path ''\n"
      "  for w in (commandline -opc)[2..-1]\n"
      "    set -l subs\n"
      "    switch $path\n",
      paths,
      "    end\n"
      "    if contains -- $w $subs\n"
      "      set path (string trim -- \"$path $w\")\n"
      "    end\n"
      "  end\n"
      "  echo $path\n"
      "end\n"
      "function __lockstep_path_is\n"
      "  test (__lockstep_path) = \"$argv[1]\"\n"
      "end\n"
      "function __lockstep_jobs\n"
      "  command (commandline -opc)[1] list -o name 2>/dev/null\n"
      "end\n",
      lines);
}

}  // namespace

void AddCompletionCommand(CLI::App& app, Commands& out) {
  struct Options {
    std::string shell;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "completion",
      "print a shell completion script: source <(lockstep completion bash), or zsh; "
      "lockstep completion fish | source");
  sub->add_option("SHELL", o->shell, "bash, zsh or fish")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish"}));
  out.push_back({sub, [o, &app] {
                   if (o->shell == "fish") {
                     absl::PrintF("%s", FishScript(app));
                     return 0;
                   }
                   // zsh runs bash's completion functions through bashcompinit.
                   absl::PrintF(
                       "%s%s",
                       o->shell == "zsh" ? "autoload -U +X bashcompinit && bashcompinit\n" : "",
                       BashScript(app));
                   return 0;
                 }});
}

}  // namespace lockstep::cli
