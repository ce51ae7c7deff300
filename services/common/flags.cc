// Flags and environment variables (flags.h), the port files servers write, and the wait for
// a shutdown signal.
#include "services/common/flags.h"

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"

namespace lockstep {

std::string FlagEnvName(const std::string& name) {
  std::string env = "LOCKSTEP_";
  for (char c : name) env.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return env;
}

std::vector<std::string> EnvFlagNames() {
  std::vector<std::string> names;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    // absl's own (--flagfile, --fromenv, ...) are defined under absl/flags/.
    if (absl::StrContains(flag->Filename(), "absl/")) continue;
    names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<char*> ParseFlagsWithEnv(int argc, char** argv) {
  static std::vector<std::string> storage;  // argv strings must outlive parsing
  storage.clear();
  for (const std::string& name : EnvFlagNames()) {
    if (const char* v = std::getenv(FlagEnvName(name).c_str())) {
      storage.push_back("--" + name + "=" + v);
    }
  }
  std::vector<char*> args = {argv[0]};
  for (auto& s : storage) args.push_back(s.data());
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);  // later flags win
  return absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
}

void WritePortFile(const std::string& path, int port) {
  if (path.empty()) return;
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "%d\n", port);
    std::fclose(f);
  }
}

std::string ReadPortFile(const std::string& path, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (true) {
    std::ifstream in(path);
    std::string port;
    if (in >> port && !port.empty()) return port;
    if (absl::Now() >= end) return "";
    absl::SleepFor(absl::Milliseconds(50));
  }
}

namespace {
sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
}  // namespace

void BlockShutdownSignals() {
  sigset_t set = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal(const std::function<bool()>& give_up, absl::Duration poll) {
  const sigset_t set = ShutdownSignals();
  const timespec period = absl::ToTimespec(poll);
  while (true) {
    if (const int signal = sigtimedwait(&set, nullptr, &period); signal > 0) return signal;
    if (give_up && give_up()) return 0;
  }
}

}  // namespace lockstep
