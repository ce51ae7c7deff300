// The `lockstep` binary as a user runs it: every subcommand's --help, --version, bad usage
// (exit 2, naming the problem), options read from their environment variables; and
// against a detached local cluster, `list --state/--limit`, and `watch --json` streaming a
// running job's events as JSON lines with their zero-valued fields.
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "clients/cli/cli_testing.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using cli_testing::CliTest;
using cli_testing::kCli;
using cli_testing::Lines;
using cli_testing::ReadFile;
using cli_testing::Result;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST_F(CliTest, EverySubcommandsHelpExitsZeroAndNamesItsOptions) {
  const std::vector<std::string> connection = {"--coordinator", "--credentials", "--tls-ca",
                                               "--token-file",  "--insecure",    "LOCKSTEP_TLS_CA"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"",
       {"train", "cluster", "submit", "list", "status", "watch", "cancel", "workers", "checkpoint",
        "logs", "health", "certs", "--version", "Exit codes"}},
      {"train", {"SPEC", "--json", "--data", "--threads"}},
      {"cluster", {"up", "down", "add-worker", "data-root"}},
      {"cluster data-root add", {"FOLDER", "--dir"}},
      {"cluster up", {"--workers", "--threads", "--dir", "--port", "--detach", "--insecure"}},
      {"cluster down", {"--dir", "LOCKSTEP_CLUSTER_DIR"}},
      {"submit", {"SPEC", "--wait", "--workers", "--request-id", "--json"}},
      {"list", {"--state", "--limit", "--json"}},
      {"status", {"JOB", "--json"}},
      {"watch", {"JOB", "--json"}},
      {"cancel", {"JOB", "--json"}},
      {"workers", {"--json", "revoke"}},
      {"workers revoke", {"ID"}},
      {"logs", {"JOB", "--follow", "-f", "--json", "--no-steps", "--level"}},
      {"checkpoint", {"JOB", "--output", "--step"}},
      {"health", {"HOST:PORT", "--timeout", "--server-name"}},
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
  // The checksum in hex too, as the text and the dashboard show it (at 0692893 the text
  // and JSON said decimal, the dashboard hex).
  const std::string hex =
      absl::StrFormat("%016x", std::stoull(result["param_checksum"].get<std::string>()));
  EXPECT_EQ(result["param_checksum_hex"], hex);
  EXPECT_THAT(Run("train --threads 1 " + spec("train.npz")).out,
              HasSubstr("params checksum " + hex + "\n"));
  const Result bad = Run("train --json --threads 1 " + spec("bad.npz"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("dataset.train_path: " + (dir_ / "bad.npz").string() +
                                 ": array 'label': label 12 at index 95 is not in [0, 10)"));
}

// A `workers: 2` spec means one run everywhere: `lockstep train` computes its 2 replicas
// (each its half of the batch and its own dropout keys) as logical replicas, the run of
// `replicas: 2`, never a run of one replica (at 0692893 it trained N = 1: another run).
TEST_F(CliTest, TrainRunsAWorkersSpecsReplicasAndItsHelpSaysSo) {
  const auto spec = [&](const std::string& name, const std::string& layout) {
    const std::string path = (dir_ / (name + ".yaml")).string();
    std::ofstream(path) << "model: {kind: mlp, hidden: [16], dropout_rate: 0.3}\n"
                        << "optimizer: {kind: adam, learning_rate: 0.001}\n"
                        << "global_batch_size: 32\nsteps: 4\n"
                        << layout;
    return path;
  };
  const auto checksum = [&](const std::string& path) {
    const Result r = Run("train --json --threads 1 " + path);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["param_checksum"].get<std::string>()
                            : std::string("failed");
  };
  const std::string two_workers = checksum(spec("workers", "workers: 2\n"));
  EXPECT_EQ(two_workers, checksum(spec("replicas", "replicas: 2\n")));
  EXPECT_NE(two_workers, checksum(spec("one", "workers: 1\n")));
  const Result text = Run("train --threads 1 " + spec("workers", "workers: 2\n"));
  EXPECT_THAT(text.err, HasSubstr("workers: 2 trains here as 2 logical replicas"));
  EXPECT_THAT(Run("train --help").out, HasSubstr("logical replicas"));
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
// a local cluster read one's own NPZ files (a path elsewhere was refused at submit). At
// 0692893 the data roots were fixed at `cluster up`, and the refusal did not say how to
// add one.
TEST_F(CliTest, ClusterUpDataRootLetsItsJobsReadDatasetsThereAndDataRootAddMore) {
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
  EXPECT_EQ(Run("cluster up --workers 1 --data-root " + (dir_ / "nowhere").string()).exit_code, 2);
  fs::create_directories(dir_ / "other");
  const Result up = Run("cluster up --workers 1 --threads 1 --detach --data-root " + data.string() +
                            " --data-root " + (dir_ / "other").string(),
                        env);
  ASSERT_EQ(up.exit_code, 0) << up.err;
  // How to reach it from another folder (at 0692893 the export line had no
  // LOCKSTEP_CLUSTER_DIR, and its `cluster down` hint failed elsewhere).
  const std::string cluster = (dir_ / "cluster").string();
  EXPECT_THAT(up.out, HasSubstr("export LOCKSTEP_CLUSTER_DIR=" + cluster + " "));
  EXPECT_THAT(up.out, HasSubstr("lockstep cluster down --dir " + cluster + "\n"));
  Result r = Run("submit --wait --json " + spec.string(), env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"state\":\"SUCCEEDED\""));

  // A folder of the running cluster's: refused, saying how to add it; added, read.
  const fs::path more = dir_ / "more";
  fs::create_directories(more);
  fs::copy_file(npz, more / "train.npz");
  const fs::path spec2 = dir_ / "spec2.json";
  nlohmann::json moved = nlohmann::json::parse(ReadFile(spec));
  moved["dataset"]["train_path"] = moved["dataset"]["test_path"] = (more / "train.npz").string();
  std::ofstream(spec2) << moved.dump();
  r = Run("submit " + spec2.string(), env);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("is outside the data roots"));
  EXPECT_THAT(r.err, HasSubstr("lockstep cluster data-root add FOLDER"));
  r = Run("cluster data-root add " + more.string(), env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("cluster data-root add: " + more.string() +
                               ": every server restarted with it"));
  EXPECT_THAT(Run("cluster data-root add " + more.string(), env).out, HasSubstr("already"));
  EXPECT_EQ(Run("cluster data-root add " + (dir_ / "nowhere").string(), env).exit_code, 2);
  r = Run("submit --wait --json " + spec2.string(), env);
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
  EXPECT_EQ(complete("lockstep cluster up --data"), "--data-root");
  EXPECT_EQ(complete("lockstep wait job-1 --ti"), "--timeout");
  EXPECT_EQ(complete("lockstep logs job-1 --ta"), "--tail");
  EXPECT_EQ(complete("lockstep workers rev"), "revoke");
  const Result zsh = Run("completion zsh");
  EXPECT_EQ(zsh.exit_code, 0);
  EXPECT_THAT(zsh.out, StartsWith("autoload -U +X bashcompinit && bashcompinit\n"));
  EXPECT_THAT(zsh.out, HasSubstr("complete -o default -F _lockstep lockstep"));
  // fish (at 0692893 there was none): a `complete` line for each command's subcommands,
  // options and JOB argument, under the command path typed so far.
  const Result fish = Run("completion fish");
  ASSERT_EQ(fish.exit_code, 0) << fish.err;
  EXPECT_THAT(fish.out, HasSubstr("function __lockstep_path\n"));
  EXPECT_THAT(fish.out,
              HasSubstr("complete -c lockstep -f -n '__lockstep_path_is \"\"' -a 'train "));
  EXPECT_THAT(
      fish.out,
      HasSubstr("complete -c lockstep -n '__lockstep_path_is \"cluster up\"' -l data-root\n"));
  EXPECT_THAT(fish.out, HasSubstr("complete -c lockstep -f -n '__lockstep_path_is \"status\"' -a "
                                  "'(__lockstep_jobs)'\n"));
  EXPECT_THAT(fish.out, HasSubstr("case 'cluster'\n        set subs up down add-worker"));
  EXPECT_EQ(Run("completion tcsh").exit_code, 2);
}

// At 0692893 flags were spelled both ways (--request-id, --data_root, --tls_ca), an
// underscore spelling of a dashed flag was "not expected", a mistyped command or flag got
// no suggestion, and options before the subcommand (`lockstep --dir X list`) were refused.
TEST_F(CliTest, FlagsAreDashedTheOldSpellingsWorkWithANoteAndTyposGetASuggestion) {
  // Every option of every command is spelled with dashes.
  const Result bash = Run("completion bash");
  for (const std::string& word :
       std::vector<std::string>(absl::StrSplit(bash.out, absl::ByAnyChar(" \"\n")))) {
    if (word.starts_with("--")) {
      EXPECT_EQ(word.find('_'), std::string::npos) << word;
    }
  }
  // The underscore spellings still work, with a note.
  const std::string typo = (dir_ / "clustr").string();
  Result r = Run("list --token_file /nonexistent --tls_ca /nonexistent --dir " + typo);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("note: --token_file is deprecated: use --token-file\n"));
  EXPECT_THAT(r.err, HasSubstr("note: --tls_ca is deprecated: use --tls-ca\n"));
  EXPECT_THAT(r.err, HasSubstr("--tls-ca: cannot read /nonexistent"));  // the option took
  r = Run("submit " + (dir_ / "none.yaml").string() + " --request_id rq1");
  EXPECT_THAT(r.err, HasSubstr("note: --request_id is deprecated: use --request-id"));
  EXPECT_THAT(r.err, Not(HasSubstr("not expected")));
  // Options anywhere on the line, also before the subcommand, as kubectl's.
  for (const std::string& args : std::vector<std::string>{
           "--dir " + typo + " list", "--insecure --dir=" + typo + " status job-1",
           "cluster --dir " + typo + " down"}) {
    r = Run(args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_THAT(r.err, AnyOf(HasSubstr("no Lockstep cluster in " + typo),
                             HasSubstr("no cluster recorded in " + typo)))
        << args;
  }
  EXPECT_EQ(Run("--json --version").exit_code, 0);
  // A mistyped command or option: the one meant.
  for (const auto& [args, meant] : std::vector<std::pair<std::string, std::string>>{
           {"sumbit spec.yaml", "sumbit: did you mean submit?"},
           {"lsit", "lsit: did you mean list?"},
           {"cluster dwon", "dwon: did you mean down?"},
           {"workers revoek w1", "revoek: did you mean revoke?"},
           {"list --limt 5", "--limt: did you mean --limit?"},
           {"logs job-1 --folow", "--folow: did you mean --follow?"},
           {"submit spec.yaml --wiat", "--wiat: did you mean --wait?"}}) {
    r = Run(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(meant)) << args;
  }
  r = Run("frobnicate");  // nothing close: no suggestion
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, Not(HasSubstr("did you mean")));
}

// At 0692893 `lockstep list` with no cluster anywhere said "INVALID_ARGUMENT: no
// credentials for 127.0.0.1:7070"; a missing spec file exited 1 (bad usage is 2); and
// `epochs: five` got protobuf's "Invalid value for TYPE_UINT32".
TEST_F(CliTest, NoClusterHereAMissingSpecAndAMistypedFieldSayWhatToDo) {
  fs::create_directories(dir_ / "empty");
  for (const std::string args : {"list", "status job-1", "logs job-1"}) {
    const Result r = Run(args, "LOCKSTEP_CLUSTER_DIR=", dir_ / "empty");
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("no cluster here (no .lockstep-cluster in " +
                                 fs::canonical(dir_ / "empty").string() + ")"))
        << args;
    EXPECT_THAT(r.err, HasSubstr("lockstep cluster up")) << args;
    EXPECT_THAT(r.err, HasSubstr("--dir DIR")) << args;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
  }
  const std::string missing = (dir_ / "nope.yaml").string();
  for (const std::string sub : {"submit", "train"}) {
    const Result r = Run(sub + " " + missing);
    EXPECT_EQ(r.exit_code, 2) << sub << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(missing + ": cannot read spec file")) << sub;
  }
  const fs::path spec = dir_ / "five.yaml";
  std::ofstream(spec) << "model: {kind: mlp, hidden: [16]}\nepochs: five\n";
  const Result r = Run("train " + spec.string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err,
              HasSubstr(spec.string() + ": epochs: expected a whole number >= 0, not \"five\""));
  EXPECT_THAT(r.err, Not(HasSubstr("TYPE_UINT32")));
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

}  // namespace
}  // namespace lockstep
