// The `lockstep` binary as a user runs it: every subcommand's --help, --version, bad usage
// (exit 2, naming the problem), options read from their environment variables; and
// against a detached local cluster, `list --state/--limit`, and `watch --json` streaming a
// running job's events as JSON lines with their zero-valued fields.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
using ::testing::Not;
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

// At 400deec `lockstep train` wrote a checkpoint only where the spec named one (it had no
// -o), and `checkpoint -o FILE` overwrote FILE without a word.
TEST_F(CliTest, TrainWritesToOutputAndNeitherItNorCheckpointOverwritesWithoutForce) {
  std::string pixels(64 * 784, '\0');
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>(i * 29 % 251);
  std::vector<uint8_t> labels(64);
  for (int i = 0; i < 64; ++i) labels[i] = static_cast<uint8_t>(i % 10);
  const std::string npz = (dir_ / "train.npz").string();
  testing::WriteFile(npz,
                     testing::NpzBytes(testing::NpyBytes("|u1", {64, 28, 28, 1}, pixels),
                                       testing::NpyBytes("|u1", {64}, testing::RawBytes(labels))));
  const std::string spec = (dir_ / "spec.yaml").string();
  std::ofstream(spec)
      << "model: {kind: mlp, hidden: [16]}\noptimizer: {kind: sgd, learning_rate: 0.01}\n"
      << "dataset: {format: npz, train_path: " << npz << ", test_path: " << npz
      << "}\nglobal_batch_size: 32\nepochs: 1\n";
  const fs::path model = dir_ / "sub" / ".." / "model.safetensors";
  fs::create_directories(dir_ / "sub");
  Result r = Run("train --json --threads 1 " + spec + " -o " + model.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("checkpoint"), (dir_ / "model.safetensors").string());
  ASSERT_TRUE(fs::exists(dir_ / "model.safetensors"));
  const auto written = fs::last_write_time(dir_ / "model.safetensors");
  r = Run("train --json --threads 1 " + spec + " -o " + model.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(model.string() + " exists: pass --force"));
  EXPECT_EQ(fs::last_write_time(dir_ / "model.safetensors"), written);
  r = Run("train --json --threads 1 " + spec + " -o " + model.string() + " --force");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // `checkpoint -o` refuses the file before it asks the coordinator for anything.
  r = Run("checkpoint job-000001 --insecure --coordinator 127.0.0.1:9 -o " + model.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(model.string() + " exists: pass --force"));
  r = Run("checkpoint job-000001 --insecure --coordinator 127.0.0.1:9 --force -o " +
          model.string());
  EXPECT_THAT(r.err, HasSubstr("no coordinator answers at 127.0.0.1:9"));  // it went on
}

// At 400deec `cluster up` had no --data_root: only the undocumented LOCKSTEP_DATA_ROOT let
// a local cluster read one's own NPZ files (a path elsewhere was refused at submit).
TEST_F(CliTest, ClusterUpDataRootLetsItsJobsReadDatasetsThere) {
  const fs::path data = dir_ / "mydata";
  fs::create_directories(data);
  std::string pixels(64 * 784, '\0');
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>(i * 23 % 241);
  std::vector<uint8_t> labels(64);
  for (int i = 0; i < 64; ++i) labels[i] = static_cast<uint8_t>(i % 10);
  const std::string npz = (data / "train.npz").string();
  testing::WriteFile(npz,
                     testing::NpzBytes(testing::NpyBytes("|u1", {64, 28, 28, 1}, pixels),
                                       testing::NpyBytes("|u1", {64}, testing::RawBytes(labels))));
  const fs::path spec = dir_ / "spec.json";
  std::ofstream(spec) << nlohmann::json{
      {"model", {{"kind", "mlp"}, {"hidden", {16}}}},
      {"optimizer", {{"kind", "sgd"}, {"learning_rate", 0.01}}},
      {"dataset", {{"format", "npz"}, {"train_path", npz}, {"test_path", npz}}},
      {"global_batch_size", 32},
      {"steps", 2},
      {"workers", 1}};
  const std::string env = "LOCKSTEP_CLUSTER_DIR=" + (dir_ / "cluster").string();
  EXPECT_EQ(Run("cluster up --workers 1 --data_root " + (dir_ / "nowhere").string()).exit_code, 2);
  const Result up = Run("cluster up --workers 1 --threads 1 --detach --data_root " + data.string() +
                            " --data_root /tmp",
                        env);
  ASSERT_EQ(up.exit_code, 0) << up.err;
  const Result r = Run("submit --wait --json " + spec.string(), env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"state\":\"SUCCEEDED\""));
  EXPECT_EQ(Run("cluster down", env).exit_code, 0);
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

// At 400deec there was no completion script.
TEST_F(CliTest, CompletionScriptsCompleteCommandsSubcommandsAndOptions) {
  const Result bash = Run("completion bash");
  ASSERT_EQ(bash.exit_code, 0) << bash.err;
  const fs::path script = dir_ / "lockstep.bash";
  std::ofstream(script) << bash.out;
  // What bash offers after the words typed so far (the last one being completed).
  const auto complete = [&](const std::string& words) {
    const fs::path out = dir_ / "complete.out";
    const std::string cmd = absl::StrCat(
        "bash -c 'source ", script.string(), "; COMP_WORDS=(", words,
        "); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _lockstep; echo \"${COMPREPLY[*]}\"' >",
        out.string(), " 2>&1");
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::string text = ReadFile(out);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  };
  EXPECT_EQ(complete("lockstep su"), "submit");
  EXPECT_EQ(complete("lockstep cluster u"), "up");
  EXPECT_EQ(complete("lockstep cluster up --data"), "--data_root");
  EXPECT_EQ(complete("lockstep wait job-1 --ti"), "--timeout");
  EXPECT_EQ(complete("lockstep logs job-1 --ta"), "--tail");
  EXPECT_EQ(complete("lockstep workers rev"), "revoke");
  const Result zsh = Run("completion zsh");
  EXPECT_EQ(zsh.exit_code, 0);
  EXPECT_THAT(zsh.out, StartsWith("autoload -U +X bashcompinit && bashcompinit\n"));
  EXPECT_THAT(zsh.out, HasSubstr("complete -o default -F _lockstep lockstep"));
  EXPECT_EQ(Run("completion fish").exit_code, 2);
}

// stderr's lines.
int Lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// At 400deec job commands rejected --dir and named LOCKSTEP_CLUSTER_DIR nowhere; a
// mistyped cluster folder fell back to 127.0.0.1:7070 without a word; no coordinator was
// raw gRPC ("failed to connect to all addresses ..."), and `watch` retried for 30 s first;
// --coordinator without a port dialled port 0 and exited 1.
TEST_F(CliTest, JobCommandsFindTheClusterOrSayInOneLineWhyNot) {
  for (const std::string sub : {"submit", "list", "status", "watch", "cancel", "workers",
                                "workers revoke", "logs", "checkpoint"}) {
    const Result r = Run(sub + " --help");
    EXPECT_THAT(r.out, HasSubstr("--dir")) << sub;
    EXPECT_THAT(r.out, HasSubstr("LOCKSTEP_CLUSTER_DIR")) << sub;
  }
  // A folder that holds no cluster, named by --dir or by the variable: an error naming it.
  const std::string typo = (dir_ / "clustr").string();
  for (const auto& [args, env] : std::vector<std::pair<std::string, std::string>>{
           {"list --dir " + typo, ""},
           {"status job-000001", "LOCKSTEP_CLUSTER_DIR=" + typo},
           {"logs job-000001 --insecure --dir " + typo, ""}}) {
    const Result r = Run(args, env);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("no Lockstep cluster in " + typo)) << args;
    EXPECT_THAT(r.err, Not(HasSubstr("7070"))) << args;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
  }
  // A cluster folder whose coordinator is gone: one line naming the address and where it
  // came from, from every command (watch at once).
  const fs::path gone = dir_ / "gone";
  fs::create_directories(gone);
  std::ofstream(gone / "cluster.json") << R"({"coordinator": "127.0.0.1:9"})";
  for (const std::string args : {"list", "watch job-000001", "logs job-000001", "cancel job-1"}) {
    const Result r = Run(args + " --insecure --dir " + gone.string());
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("no coordinator answers at 127.0.0.1:9 (the cluster in " +
                                 gone.string() + ")"))
        << args;
    EXPECT_THAT(r.err, HasSubstr("lockstep cluster up")) << args;
    EXPECT_EQ(Lines(r.err), 1) << args << "\n" << r.err;
  }
  // --coordinator HOST without a port: bad usage.
  for (const std::string address : {"127.0.0.1", "127.0.0.1:", "host:http", "127.0.0.1:70000"}) {
    const Result r = Run("list --insecure --coordinator " + address);
    EXPECT_EQ(r.exit_code, 2) << address << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("--coordinator " + address + ": not HOST:PORT")) << address;
  }
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

}  // namespace
}  // namespace lockstep
