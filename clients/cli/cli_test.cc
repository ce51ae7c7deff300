// The `lockstep` binary as a user runs it: every subcommand's --help, --version, bad usage
// (exit 2, naming the problem), options read from their environment variables; and
// against a detached local cluster, `list --state/--limit`, and `watch --json` streaming a
// running job's events as JSON lines with their zero-valued fields.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/data/npz_testing.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kCli = std::string(LOCKSTEP_BINARY_DIR) + "/clients/lockstep";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Result {
  int exit_code;
  std::string out, err;
};

// A folder of its own per test, removed after.
class CliTest : public ::testing::Test {
 protected:
  CliTest()
      : dir_(fs::temp_directory_path() /
             absl::StrCat("lockstep-cli-", getpid(), "-", absl::ToUnixMicros(absl::Now()))) {
    fs::create_directories(dir_);
  }
  ~CliTest() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // `env lockstep ARGS` through the shell, with no local cluster unless `env` names one.
  Result Run(const std::string& args, const std::string& env = "") {
    const std::string out = (dir_ / "out").string(), err = (dir_ / "err").string();
    const std::string cmd =
        absl::StrCat("env -u LOCKSTEP_COORDINATOR -u LOCKSTEP_CREDENTIALS -u LOCKSTEP_INSECURE ",
                     "LOCKSTEP_CLUSTER_DIR=", (dir_ / "no-cluster").string(), " ", env, " ", kCli,
                     " ", args, " >", out, " 2>", err, " </dev/null");
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(out), ReadFile(err)};
  }

  const fs::path dir_;
};

TEST_F(CliTest, EverySubcommandsHelpExitsZeroAndNamesItsOptions) {
  const std::vector<std::string> connection = {"--coordinator", "--credentials", "--tls_ca",
                                               "--token_file",  "--insecure",    "LOCKSTEP_TLS_CA"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"",
       {"train", "cluster", "submit", "list", "status", "watch", "cancel", "workers", "checkpoint",
        "logs", "health", "certs", "--version", "Exit codes"}},
      {"train", {"SPEC", "--json", "--data", "--threads"}},
      {"cluster", {"up", "down"}},
      {"cluster up", {"--workers", "--threads", "--dir", "--port", "--detach", "--insecure"}},
      {"cluster down", {"--dir", "LOCKSTEP_CLUSTER_DIR"}},
      {"submit", {"SPEC", "--wait", "--workers", "--request-id", "--json"}},
      {"list", {"--state", "--limit", "--json"}},
      {"status", {"JOB", "--json"}},
      {"watch", {"JOB", "--json"}},
      {"cancel", {"JOB", "--json"}},
      {"workers", {"--json", "revoke"}},
      {"workers revoke", {"ID"}},
      {"logs", {"JOB", "--follow", "-f", "--json"}},
      {"checkpoint", {"JOB", "--output", "--step"}},
      {"health", {"HOST:PORT", "--timeout", "--server_name"}},
      {"certs", {"--out", "--hosts", "--users", "--workers", "--k8s-secrets", "--namespace"}},
  };
  for (const auto& [sub, options] : cases) {
    const Result r = Run(sub + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub << "\n" << r.err;
    EXPECT_THAT(r.out, HasSubstr("Usage:")) << sub;
    for (const std::string& option : options) EXPECT_THAT(r.out, HasSubstr(option)) << sub;
    const bool job_command =
        sub != "" && sub != "train" && !sub.starts_with("cluster") && sub != "certs";
    if (job_command) {
      for (const std::string& option : connection) EXPECT_THAT(r.out, HasSubstr(option)) << sub;
    }
  }
  // `help [COMMAND...]` is `[COMMAND...] --help` (at 400deec `help` printed its own
  // usage and `help submit` failed, asking for a SPEC).
  for (const auto& [args, usage] : std::vector<std::pair<std::string, std::string>>{
           {"help", "Usage: lockstep [OPTIONS] [SUBCOMMAND]"},
           {"help submit", "Usage: lockstep submit [OPTIONS] SPEC"},
           {"help cluster up", "Usage: lockstep cluster up [OPTIONS]"}}) {
    const Result r = Run(args);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    EXPECT_THAT(r.out, HasSubstr(usage)) << args;
  }
}

TEST_F(CliTest, VersionIsTheBuilds) {
  for (const std::string args : {"--version", "train --version"}) {
    const Result r = Run(args);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    EXPECT_EQ(r.out, std::string(LOCKSTEP_VERSION) + "\n") << args;
    EXPECT_THAT(r.out, StartsWith("0.")) << args;
  }
}

TEST_F(CliTest, BadUsageExitsTwoNamingTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "subcommand"},
      {"frobnicate", "frobnicate"},
      {"list --bogus", "--bogus"},
      {"list --limit -1", "--limit"},
      {"list --limit lots", "--limit"},
      {"list --state RUNNING,NOPE --insecure", "NOPE"},
      {"status", "JOB"},
      {"status a b", "b"},
      {"workers revoke", "ID"},
      {"checkpoint job-000001", "--output"},
      {"cluster", "subcommand"},
      {"cluster up --workers many", "--workers: must be a number >= 1, not \"many\""},
      {"cluster up --workers 0", "--workers: must be a number >= 1, not \"0\""},
      {"cluster sideways", "sideways"},
      {"health --timeout soon", "--timeout"},
      {"train", "SPEC"},
      {"train spec.yaml --bogus", "--bogus"},
      {"help frobnicate", "no command frobnicate"},
  };
  for (const auto& [args, named] : cases) {
    const Result r = Run(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(named)) << args;
    EXPECT_THAT(r.err, HasSubstr("error")) << args;
  }
}

TEST_F(CliTest, TrainReadsAnNpzDatasetAndNamesTheArrayTheModelCannotFit) {
  // 96 training and 40 test images, uint8, and int16 labels (the last one 12 in bad.npz).
  const auto write = [&](const std::string& name, int n, int last_label) {
    std::string pixels(static_cast<size_t>(n) * 784, '\0');
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>(i * 37 % 251);
    std::vector<int16_t> labels(n);
    for (int i = 0; i < n; ++i) labels[i] = static_cast<int16_t>(i % 10);
    labels.back() = static_cast<int16_t>(last_label);
    testing::WriteFile((dir_ / name).string(),
                       testing::NpzBytes(testing::NpyBytes("|u1", {n, 28, 28, 1}, pixels),
                                         testing::NpyBytes("<i2", {n}, testing::RawBytes(labels)),
                                         /*compressed=*/name == "test.npz"));
  };
  write("train.npz", 96, 5);
  write("test.npz", 40, 3);
  write("bad.npz", 96, 12);
  const auto spec = [&](const std::string& train) {
    const std::string path = (dir_ / (train + ".yaml")).string();
    std::ofstream(path) << "model: {kind: mlp, hidden: [16]}\n"
                        << "optimizer: {kind: adam, learning_rate: 0.001}\n"
                        << "dataset:\n  format: npz\n  train_path: " << (dir_ / train).string()
                        << "\n  test_path: " << (dir_ / "test.npz").string()
                        << "\n  normalize: {mean: [0.286], std: [0.353]}\n"
                        << "global_batch_size: 32\nepochs: 2\n";
    return path;
  };
  const Result ok = Run("train --json --threads 1 " + spec("train.npz"));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const nlohmann::json result = nlohmann::json::parse(ok.out);
  EXPECT_EQ(result["steps"], 6);  // 96 / 32 steps an epoch
  // The figures this spec trains to (the run is deterministic: the plan's data order and
  // keys, the CPU backend's bits for --threads 1): 2 of the 40 test images, and the loss
  // to float rounding (oneDNN's kernels differ by ISA), so a change to the training shows.
  EXPECT_EQ(result["test_accuracy"].get<double>(), 2.0 / 40);
  EXPECT_NEAR(result["test_loss"].get<double>(), 2.27539158, 1e-4);
  EXPECT_NEAR(result["final_train_loss"].get<double>(), 2.32150745, 1e-4);
  const Result bad = Run("train --json --threads 1 " + spec("bad.npz"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("dataset.train_path: " + (dir_ / "bad.npz").string() +
                                 ": array 'label': label 12 at index 95 is not in [0, 10)"));
}

TEST_F(CliTest, TrainDataPointsAnNpzSpecAtAFolder) {
  // train.npz and test.npz in dir_/npz; the spec names no files, or one relative to --data.
  fs::create_directories(dir_ / "npz" / "v2");
  std::string pixels(64 * 784, '\0');
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>(i * 31 % 253);
  std::vector<uint8_t> labels(64);
  for (int i = 0; i < 64; ++i) labels[i] = static_cast<uint8_t>(i % 10);
  const std::string npz =
      testing::NpzBytes(testing::NpyBytes("|u1", {64, 28, 28, 1}, pixels),
                        testing::NpyBytes("|u1", {64}, testing::RawBytes(labels)));
  for (const char* name : {"npz/train.npz", "npz/test.npz", "npz/v2/test.npz"}) {
    testing::WriteFile((dir_ / name).string(), npz);
  }
  const auto spec = [&](const std::string& name, const std::string& dataset) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << "model: {kind: mlp, hidden: [16]}\n"
                        << "optimizer: {kind: sgd, learning_rate: 0.01}\n"
                        << "dataset: " << dataset << "\nglobal_batch_size: 32\nepochs: 1\n";
    return path;
  };
  const std::string data = " --data " + (dir_ / "npz").string();
  Result r = Run("train --json --threads 1 " + spec("bare.yaml", "{format: npz}") + data);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["steps"], 2);
  r = Run("train --json --threads 1 " +
          spec("rel.yaml", "{format: npz, train_path: train.npz, test_path: v2/test.npz}") + data);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Without --data the same relative paths are read from the current folder: not there.
  r = Run("train --json --threads 1 " + (dir_ / "rel.yaml").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("train.npz"));
  r = Run("train --json --threads 1 " +
          spec("abs.yaml", "{format: npz, train_path: /nowhere/train.npz}") + data);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("dataset.train_path is absolute (/nowhere/train.npz)"));
  r = Run("train --help");
  EXPECT_THAT(r.out, HasSubstr("train_path and test_path are read relative to it"));
}

TEST_F(CliTest, ConnectionOptionsReadTheirEnvironmentVariables) {
  // No credentials anywhere: the error names the address from $LOCKSTEP_COORDINATOR.
  Result r = Run("list", "LOCKSTEP_COORDINATOR=127.0.0.1:9");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("no credentials for 127.0.0.1:9"));
  // The flag wins over the variable.
  r = Run("list --coordinator 127.0.0.1:8", "LOCKSTEP_COORDINATOR=127.0.0.1:9");
  EXPECT_THAT(r.err, HasSubstr("no credentials for 127.0.0.1:8"));
  // $LOCKSTEP_INSECURE: plaintext, so no credentials needed; nothing listens there.
  r = Run("list", "LOCKSTEP_COORDINATOR=127.0.0.1:9 LOCKSTEP_INSECURE=1");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("UNAVAILABLE"));
  // $LOCKSTEP_CREDENTIALS and $LOCKSTEP_TLS_CA: the files they name are read.
  r = Run("list", absl::StrCat("LOCKSTEP_CREDENTIALS=", (dir_ / "creds").string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr((dir_ / "creds" / "ca.pem").string()));
  r = Run("list", absl::StrCat("LOCKSTEP_TLS_CA=", (dir_ / "my-ca.pem").string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr((dir_ / "my-ca.pem").string()));
}

// A detached local cluster of 2 workers in the test's folder, which the CLI finds there
// ($LOCKSTEP_CLUSTER_DIR): TLS and the admin token, as by default.
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

}  // namespace
}  // namespace lockstep
