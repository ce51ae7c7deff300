// The `lockstep` binary against a detached local cluster in the test's folder: `list`,
// `watch --json`, history, waiting, and what it says of foreign credentials.
#include <signal.h>

#include "clients/cli/cli_testing.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using cli_testing::CliTest;
using cli_testing::kCli;
using cli_testing::Lines;
using cli_testing::ReadFile;
using cli_testing::Result;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class CliClusterTest : public CliTest {
 protected:
  void SetUp() override {
    const Result up = Run("cluster up --workers 2 --threads 1 --detach", Env());
    ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
    up_ = true;
  }
  void TearDown() override {
    if (up_) {
      EXPECT_EQ(Run("cluster down", Env()).exit_code, 0);
    }
    if (HasFailure()) {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(dir_ / "cluster" / "logs", ec)) {
        std::cerr << "--- " << e.path().filename() << "\n" << ReadFile(e.path());
      }
    }
  }
  std::string Env() const { return "LOCKSTEP_CLUSTER_DIR=" + (dir_ / "cluster").string(); }

  // A job spec file: the small MLP for `steps` steps on 2 workers.
  std::string Spec(const std::string& name, int steps) {
    const fs::path path = dir_ / (name + ".json");
    std::ofstream(path) << nlohmann::json{
        {"name", name},
        {"model", {{"kind", "mlp"}, {"hidden", {32}}}},
        {"optimizer", {{"kind", "adam"}, {"learning_rate", 0.001}}},
        {"global_batch_size", 64},
        {"steps", steps},
        {"workers", 2}};
    return path.string();
  }
  nlohmann::json Json(const std::string& args) {
    const Result r = Run(args + " --json", Env());
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    return nlohmann::json::parse(r.out);
  }
  static std::vector<std::string> Ids(const nlohmann::json& list) {
    std::vector<std::string> ids;
    for (const auto& job : list.at("jobs")) ids.push_back(job.at("id"));
    return ids;
  }

  bool up_ = false;
};

TEST_F(CliClusterTest, WatchJsonStreamsStepEventsWhileTheJobRunsAndListFilters) {
  const nlohmann::json done = Json("submit --wait " + Spec("short", 10));
  ASSERT_EQ(done.at("state"), "SUCCEEDED") << done.dump();
  EXPECT_EQ(done.at("recoveries"), 0) << "zero-valued fields are printed: " << done.dump();
  EXPECT_EQ(done.at("failure_reason"), "");
  const std::string short_id = done.at("id");
  const std::string long_id = Json("submit " + Spec("long", 1000000)).at("id");

  // `watch --json | head`: lines arrive while the job runs, one JSON object each.
  const std::string watch = absl::StrCat(Env(), " ", kCli, " watch ", long_id, " --json 2>",
                                         (dir_ / "watch.err").string());
  FILE* pipe = popen(watch.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::vector<nlohmann::json> events;
  std::vector<int64_t> steps;
  char line[1 << 16];
  while (steps.size() < 5 && fgets(line, sizeof(line), pipe) != nullptr) {
    events.push_back(nlohmann::json::parse(line));  // throws (fails) unless JSON
    if (events.back().contains("step"))
      steps.push_back(std::stoll(events.back()["step"]["step"].get<std::string>()));
  }
  ASSERT_EQ(steps.size(), 5u) << ReadFile(dir_ / "watch.err");
  EXPECT_EQ(Json("status " + long_id).at("state"), "RUNNING");
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_EQ(steps[i], steps[i - 1] + 1);
  const nlohmann::json& first_step = *std::find_if(
      events.begin(), events.end(), [](const nlohmann::json& e) { return e.contains("step"); });
  EXPECT_EQ(first_step["step"].at("epoch"), "0") << first_step.dump();  // int64: a string

  EXPECT_EQ(Ids(Json("list --state RUNNING")), std::vector<std::string>{long_id});
  EXPECT_EQ(Ids(Json("list --state succeeded,RUNNING")),
            (std::vector<std::string>{long_id, short_id}));
  EXPECT_EQ(Ids(Json("list --state SUCCEEDED --state RUNNING --limit 1")),
            std::vector<std::string>{long_id});
  EXPECT_EQ(Ids(Json("list --limit 5")), (std::vector<std::string>{long_id, short_id}));
  EXPECT_EQ(Ids(Json("list --state FAILED")), std::vector<std::string>{});

  // Cancelled: the stream ends with that state, and watch exits 1.
  EXPECT_EQ(Run("cancel " + long_id, Env()).exit_code, 0);
  while (fgets(line, sizeof(line), pipe) != nullptr) events.push_back(nlohmann::json::parse(line));
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  ASSERT_TRUE(events.back().contains("state")) << events.back().dump();
  EXPECT_EQ(events.back()["state"].at("state"), "CANCELLED");
}

// At 400deec a finished job kept no steps (`watch` and `logs` showed none), `logs` printed
// its two streams as they came (not in time order), had no --tail or --since, and every
// command wanted the whole id.
TEST_F(CliClusterTest, AFinishedJobsStepsAndLogsInTimeOrderByAPrefixOfItsId) {
  const nlohmann::json done = Json("submit --wait " + Spec("short", 12));
  ASSERT_EQ(done.at("state"), "SUCCEEDED") << done.dump();
  const std::string id = done.at("id");
  const std::string prefix = id.substr(0, id.rfind('-'));  // "job-000001"

  const auto lines = [](const std::string& text) {
    std::vector<nlohmann::json> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  };
  Result r = Run("watch " + prefix + " --json", Env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<int64_t> steps;
  for (const nlohmann::json& e : lines(r.out)) {
    if (e.contains("step")) steps.push_back(std::stoll(e["step"]["step"].get<std::string>()));
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));

  // -f ends once the job's log is closed (its workers' last lines, shipped with their
  // heartbeats, came): what is kept is settled from then on.
  r = Run("logs " + prefix + " --json -f", Env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t followed = lines(r.out).size();
  r = Run("logs " + prefix + " --json", Env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<nlohmann::json> all = lines(r.out);
  EXPECT_EQ(all.size(), followed);  // each once
  int step_events = 0, log_lines = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    step_events += all[i].contains("step");
    log_lines += all[i].contains("log");
    if (i > 0) {
      EXPECT_LE(std::stoll(all[i - 1].at("unix_ms").get<std::string>()),
                std::stoll(all[i].at("unix_ms").get<std::string>()))
          << "line " << i << " of\n"
          << r.out;
    }
  }
  EXPECT_EQ(step_events, 12);
  EXPECT_GT(log_lines, 0);
  ASSERT_GT(all.size(), 3u);
  r = Run("logs " + prefix + " --json --tail 3", Env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines(r.out), std::vector<nlohmann::json>(all.end() - 3, all.end()));
  r = Run("logs " + id + " --json --since 1h", Env());
  EXPECT_EQ(lines(r.out).size(), all.size());
  EXPECT_EQ(Run("logs " + id + " --since yesterday", Env()).exit_code, 2);
  // Text, too: the steps' lines.
  r = Run("logs " + prefix + " --tail 40", Env());
  EXPECT_THAT(r.out, HasSubstr("step 12/12  loss"));

  // `describe` (at 400deec there was none): the job, its spec, workers, state events.
  r = Run("describe " + prefix, Env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith(id + "  SUCCEEDED  short  step 12/12"));
  EXPECT_THAT(r.out, HasSubstr("Spec:\n{\n"));
  EXPECT_THAT(r.out, HasSubstr("\"global_batch_size\": 64"));
  EXPECT_THAT(r.out, HasSubstr("  rank 1  "));
  EXPECT_THAT(r.out, HasSubstr("state RUNNING"));
  EXPECT_THAT(r.out, HasSubstr("state SUCCEEDED"));
  const nlohmann::json described = Json("describe " + id);
  EXPECT_EQ(described.at("job").at("id"), id);
  ASSERT_GE(described.at("events").size(), 3u);  // QUEUED, RUNNING, SUCCEEDED
  EXPECT_EQ(described.at("events").back().at("state").at("state"), "SUCCEEDED");
  // `list -o wide` (at 400deec there was none): a header and a line a job.
  r = Run("list -o wide", Env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("ID "));
  EXPECT_THAT(r.out, HasSubstr("SAMPLES/S"));
  EXPECT_THAT(r.out, HasSubstr(id + "  SUCCEEDED  short  12/12"));
  EXPECT_EQ(Lines(r.out), 2);

  // A prefix of two ids names neither.
  const std::string second = Json("submit --wait " + Spec("again", 2)).at("id");
  r = Run("status job-00000", Env());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("job-00000 names 2 jobs"));
  EXPECT_EQ(Json("status " + second.substr(0, second.rfind('-'))).at("id"), second);
}

// At 400deec `submit --wait` printed QUEUED without saying why, and waited forever: it had
// no --timeout, and there was no `wait JOB`.
TEST_F(CliClusterTest, WaitingSaysWhatTheJobWaitsForAndEndsAtTheTimeout) {
  const std::string spec = Spec("big", 10);
  // More workers than the cluster has: refused (at 400deec queued for good) unless --queue.
  Result r = Run("submit --workers 4 " + spec, Env());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err,
              HasSubstr("workers: the job needs 4 cpu workers; the cluster has 2 registered"));
  EXPECT_THAT(r.err, HasSubstr("--queue"));
  r = Run("submit --wait --timeout 2s --queue --workers 4 " + spec, Env());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::string waits = "waiting for 4 cpu workers (2 registered)";
  EXPECT_THAT(r.err, HasSubstr(" QUEUED\n"));
  EXPECT_THAT(r.err, HasSubstr(" " + waits + "\n"));  // the note under the state
  EXPECT_THAT(r.err, HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_THAT(r.err, HasSubstr("is still QUEUED, " + waits + " after 2s"));
  const std::vector<nlohmann::json> queued = Json("list --state QUEUED").at("jobs");
  ASSERT_EQ(queued.size(), 1u);
  const std::string id = queued[0].at("id");

  r = Run("wait " + id + " --timeout 1s", Env());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(id + " is still QUEUED, " + waits + " after 1s"));
  EXPECT_EQ(Run("wait " + id + " --timeout soon", Env()).exit_code, 2);
  r = Run("submit --timeout 5s " + spec, Env());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--timeout: only with --wait"));
  EXPECT_EQ(Run("cancel " + id, Env()).exit_code, 0);

  // `cancel` of a running job answers once it has stopped (at 400deec: RUNNING).
  const std::string running = Json("submit " + Spec("long", 1000000)).at("id");
  EXPECT_EQ(Json("cancel " + running).at("state"), "CANCELLED");

  // A job that ends within the time: `wait` prints it and exits 0.
  const std::string done = Json("submit " + Spec("short", 5)).at("id");
  const nlohmann::json waited = Json("wait " + done + " --timeout 5m");
  EXPECT_EQ(waited.at("state"), "SUCCEEDED");
  EXPECT_EQ(waited.at("id"), done);
}

// At 400deec the credentials of another cluster printed a gRPC library log line and
// "certificate verify failed", and --insecure against the TLS coordinator "Socket closed".
TEST_F(CliClusterTest, ForeignCredentialsAndPlaintextAgainstTlsSayWhatIsWrongInOneLine) {
  const std::string cluster = (dir_ / "cluster").string();
  // --dir finds the cluster (the variable names none here).
  Result r = Run("list --dir " + cluster);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "no jobs\n");

  const std::string other = (dir_ / "other").string();
  ASSERT_EQ(Run("certs --out " + other).exit_code, 0);
  r = Run("list --credentials " + other, Env());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("these credentials belong to another cluster"));
  EXPECT_THAT(r.err, HasSubstr(other + "/ca.pem"));
  EXPECT_EQ(Lines(r.err), 1) << r.err;

  r = Run("list --insecure", Env());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("closed a plaintext connection: it speaks TLS"));
  EXPECT_EQ(Lines(r.err), 1) << r.err;
}

// At 0692893 `list` and `workers` printed no header, a failed job took two lines of
// `list`, and `list --json` was one line (`| head` showed nothing of it).
TEST_F(CliClusterTest, ListAndWorkersAreTablesAndListsJsonPipes) {
  const std::string id = Json("submit --wait " + Spec("short", 5)).at("id");
  Result r = Run("list", Env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("ID "));
  EXPECT_THAT(r.out, HasSubstr("TEST-ACC"));
  EXPECT_THAT(r.out, HasSubstr(id + "  SUCCEEDED  short  5/5"));
  EXPECT_EQ(Lines(r.out), 2) << r.out;
  r = Run("list --json", Env());
  EXPECT_GT(Lines(r.out), 10) << "indented, as kubectl's -o json";
  EXPECT_EQ(nlohmann::json::parse(r.out).at("jobs").at(0).at("id"), id);
  r = Run("list -o jsonl", Env());
  EXPECT_EQ(Lines(r.out), 1);
  EXPECT_EQ(nlohmann::json::parse(r.out).at("id"), id);
  EXPECT_EQ(Run("list -o name", Env()).out, id + "\n");
  r = Run("workers", Env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("ID "));
  EXPECT_THAT(r.out, HasSubstr("STATUS"));
  EXPECT_EQ(Lines(r.out), 3) << r.out;

  // A JOB argument completes with the jobs' ids (bash; zsh runs the same script).
  const Result bash = Run("completion bash");
  std::ofstream(dir_ / "lockstep.bash") << bash.out;
  const std::string cmd =
      absl::StrCat(Env(), " bash -c 'source ", (dir_ / "lockstep.bash").string(), "; COMP_WORDS=(",
                   kCli, " status job-); COMP_CWORD=2; _lockstep; echo \"${COMPREPLY[*]}\"' >",
                   (dir_ / "complete.out").string(), " 2>&1");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(ReadFile(dir_ / "complete.out"), id + "\n");
}

// At 0692893 `watch` wrote everything to stderr (`watch J | grep` got nothing), `wait` on a
// finished job replayed its whole progress, and `logs` had no filter.
TEST_F(CliClusterTest, WatchWritesToStdoutWaitPrintsAFinishedJobOnceAndLogsFilter) {
  const std::string id = Json("submit --wait " + Spec("short", 12)).at("id");
  Result r = Run("watch " + id, Env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("step 12/12  loss"));
  EXPECT_THAT(r.out, HasSubstr(id + "  SUCCEEDED  short"));
  EXPECT_EQ(r.err, "");
  r = Run("wait " + id, Env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith(id + "  SUCCEEDED  short  step 12/12"));
  EXPECT_THAT(r.out, HasSubstr("  params checksum "));
  EXPECT_EQ(r.err, "") << "no replayed progress";

  r = Run("logs " + id, Env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("  step 12/12"));
  EXPECT_THAT(r.out, HasSubstr("  info  "));
  r = Run("logs " + id + " --no-steps", Env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("  step ")));
  EXPECT_THAT(r.out, HasSubstr("state SUCCEEDED"));
  EXPECT_THAT(r.out, HasSubstr("  info  "));
  r = Run("logs " + id + " --no-steps --level warning", Env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("  info  ")));
  EXPECT_THAT(r.out, HasSubstr("state SUCCEEDED"));
  r = Run("logs " + id + " --level loud", Env());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--level"));
}

// At 0692893 Ctrl-C during `wait` or `submit --wait` exited 130 without a word: nothing
// said that the job goes on, or how to follow it again.
TEST_F(CliClusterTest, CtrlCStopsTheWatchNotTheJobAndSaysHowToFollowIt) {
  const std::string id = Json("submit " + Spec("long", 1000000)).at("id");
  int err[2];
  ASSERT_EQ(pipe(err), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(err[1], 2);
    close(err[0]);
    setenv("LOCKSTEP_CLUSTER_DIR", (dir_ / "cluster").c_str(), 1);
    unsetenv("LOCKSTEP_COORDINATOR");
    execl(kCli.c_str(), kCli.c_str(), "wait", id.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(err[1]);
  FILE* in = fdopen(err[0], "r");
  std::string said;
  char line[4096];
  while (said.find(" RUNNING") == std::string::npos && fgets(line, sizeof(line), in) != nullptr) {
    said += line;  // the job's states so far: it watches
  }
  ASSERT_THAT(said, HasSubstr(id + " RUNNING"));
  kill(pid, SIGINT);
  while (fgets(line, sizeof(line), in) != nullptr) said += line;
  fclose(in);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << status;
  EXPECT_THAT(said, HasSubstr(id + " goes on running; only the watch stopped"));
  EXPECT_THAT(said, HasSubstr("lockstep watch " + id));
  EXPECT_THAT(said, HasSubstr("lockstep cancel " + id));
  EXPECT_EQ(Json("status " + id).at("state"), "RUNNING");
  EXPECT_EQ(Run("cancel " + id, Env()).exit_code, 0);
  // `submit` without --wait says what comes next (stderr: stdout is the job).
  const Result r = Run("submit " + Spec("next", 5), Env());
  EXPECT_THAT(r.err, HasSubstr("follow it: lockstep watch job-"));
}

// At 0692893 a job name's newline, escape and bell bytes reached the terminal raw through
// `list` and `status`: a title change and a screen clear (issue 44).
TEST_F(CliClusterTest, ControlCharactersOfAJobsNameAreQuotedInEveryTextOutput) {
  const fs::path spec = dir_ / "evil.json";
  std::ofstream(spec) << nlohmann::json{{"name", "evil\n\x1b]0;owned\x07\x1b[2J"},
                                        {"model", {{"kind", "mlp"}, {"hidden", {8}}}},
                                        {"optimizer", {{"kind", "sgd"}, {"learning_rate", 0.01}}},
                                        {"global_batch_size", 64},
                                        {"steps", 2},
                                        {"workers", 1}};
  const std::string id = Json("submit --wait " + spec.string()).at("id");
  const std::string quoted = "evil\\n\\x1b]0;owned\\x07\\x1b[2J";
  for (const std::string& args :
       std::vector<std::string>{"list", "list -o wide", "status " + id, "describe " + id,
                                "wait " + id, "watch " + id, "logs " + id}) {
    const Result r = Run(args, Env());
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    const std::string all = r.out + r.err;
    EXPECT_EQ(all.find('\x1b'), std::string::npos) << args << "\n" << all;
    EXPECT_EQ(all.find('\x07'), std::string::npos) << args << "\n" << all;
    if (args != "logs " + id) EXPECT_THAT(all, HasSubstr(quoted)) << args;
  }
  EXPECT_EQ(Lines(Run("list", Env()).out), 2);  // the header and one line: no forged line
}

}  // namespace
}  // namespace lockstep
