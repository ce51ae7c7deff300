// `lockstep completion bash|zsh`: a shell completion script for the CLI, made from its own
// parser (every command, subcommand and option), so that it never falls behind.
//   source <(lockstep completion bash)      # or zsh
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"

namespace lockstep::cli {
namespace {

// One `case` branch per command path ("", "cluster", "cluster up", ...): its subcommands
// (in `subs`) and what completes after it: subcommands and options (in `words`).
void Walk(const CLI::App& app, const std::string& path, std::string* subs, std::string* words) {
  std::vector<std::string> names, all;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  all = names;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) all.push_back("--" + l);
    for (const std::string& s : o->get_snames()) all.push_back("-" + s);
  }
  absl::StrAppendFormat(subs, "    \"%s\") echo \"%s\" ;;\n", path, absl::StrJoin(names, " "));
  absl::StrAppendFormat(words, "    \"%s\") echo \"%s\" ;;\n", path, absl::StrJoin(all, " "));
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    Walk(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), subs, words);
  }
}

std::string BashScript(const CLI::App& app) {
  std::string subs, words;
  Walk(app, "", &subs, &words);
  return absl::StrCat(
      "# lockstep completion (bash): source <(lockstep completion bash)\n"
      "__lockstep_subs() {\n  case \"$1\" in\n",
      subs,
      "  esac\n}\n"
      "__lockstep_words() {\n  case \"$1\" in\n",
      words,
      "  esac\n}\n"
      "_lockstep() {\n"
      "  local path=\"\" w s i\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    w=${COMP_WORDS[i]}\n"
      "    for s in $(__lockstep_subs \"$path\"); do\n"
      "      if [[ $w == \"$s\" ]]; then path=\"${path:+$path }$w\"; break; fi\n"
      "    done\n"
      "  done\n"
      "  COMPREPLY=($(compgen -W \"$(__lockstep_words \"$path\")\" -- "
      "\"${COMP_WORDS[COMP_CWORD]}\"))\n"
      "}\n"
      "complete -o default -F _lockstep lockstep\n");
}

}  // namespace

void AddCompletionCommand(CLI::App& app, Commands& out) {
  struct Options {
    std::string shell;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "completion", "print a shell completion script: source <(lockstep completion bash)");
  sub->add_option("SHELL", o->shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  out.push_back({sub, [o, &app] {
                   const std::string bash = BashScript(app);
                   // zsh runs bash's completion functions through bashcompinit.
                   absl::PrintF(
                       "%s%s",
                       o->shell == "zsh" ? "autoload -U +X bashcompinit && bashcompinit\n" : "",
                       bash);
                   return 0;
                 }});
}

}  // namespace lockstep::cli
