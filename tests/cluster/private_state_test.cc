// Private by default: after a job ran on a real local cluster, another local user (uid
// 65534, `nobody`) reads nothing of the coordinator's state folder (job records, snapshots,
// checkpoints, TensorBoard), the servers' logs or the cluster's credentials, nor of the
// Secrets file `lockstep certs --k8s-secrets` writes; every folder is 0700 and every file
// 0600 or tighter, and a state folder loosened by hand is tightened again when the
// coordinator starts. Becoming another user needs root (CI runs the tests as root): the
// test skips, saying so, otherwise.
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/testing.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr uid_t kNobody = 65534;
const std::string kCli = std::string(LOCKSTEP_BINARY_DIR) + "/clients/lockstep";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `dir` and everything under it (symlinks not followed).
std::vector<fs::path> Tree(const fs::path& dir) {
  std::vector<fs::path> out = {dir};
  for (const auto& e : fs::recursive_directory_iterator(dir)) out.push_back(e.path());
  return out;
}

// The entries of `paths` whose mode lets group or others in, with their modes.
std::vector<std::string> OpenToOthers(const std::vector<fs::path>& paths) {
  std::vector<std::string> out;
  for (const fs::path& p : paths) {
    struct stat st;
    if (lstat(p.c_str(), &st) != 0 || S_ISLNK(st.st_mode)) continue;
    if ((st.st_mode & 077) != 0) out.push_back(absl::StrCat(p.string(), " ", st.st_mode & 0777));
  }
  return out;
}

// The entries of `paths` that uid/gid 65534 can open for reading (a folder: list), tried in
// a child that became that user. Only async-signal-safe calls after the fork (the test has
// gRPC threads): the child reports the indices of what it opened through a pipe.
std::vector<std::string> ReadableByNobody(const std::vector<fs::path>& paths) {
  std::vector<const char*> names;
  for (const fs::path& p : paths) names.push_back(p.c_str());
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const gid_t group = kNobody;
    if (setgroups(1, &group) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0 ||
        getuid() != kNobody) {
      _exit(2);
    }
    for (int i = 0; i < static_cast<int>(names.size()); ++i) {
      const int fd = open(names[i], O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
      if (fd < 0) continue;
      close(fd);
      if (write(fds[1], &i, sizeof(i)) != sizeof(i)) _exit(3);
    }
    _exit(0);
  }
  close(fds[1]);
  std::vector<std::string> readable;
  for (int i; read(fds[0], &i, sizeof(i)) == sizeof(i);) readable.push_back(paths[i].string());
  close(fds[0]);
  int status = -1;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child as nobody: " << status;
  return readable;
}

// How many regular files lie under `dir`.
int Files(const fs::path& dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) n += e.is_regular_file();
  return n;
}

TEST(PrivateStateTest, AnotherUserReadsNothingOfTheStateLogsCredentialsOrSecrets) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "not root: cannot become uid 65534 (nobody) to try reading as another user "
                    "(CI runs the tests as root)";
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(2));
  v1::JobSpec spec = MlpSpec(2, 30);
  spec.set_tensorboard_dir("run");
  spec.mutable_recovery()->set_snapshot_every_steps(10);
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster->Submit(spec));
  ASSERT_OK_AND_ASSIGN(v1::Job done, cluster->WaitFor(job.id(), absl::Seconds(120)));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << cluster->Logs();

  // The Secrets file, over an older one readable by all, in a folder anyone may enter.
  const fs::path open_dir = fs::path(cluster->dir() + "-open");
  fs::create_directories(open_dir);
  fs::permissions(open_dir, static_cast<fs::perms>(0755));
  const fs::path secrets = open_dir / "secrets.yaml";
  std::ofstream(secrets) << "old";
  fs::permissions(secrets, static_cast<fs::perms>(0644));
  ASSERT_OK_AND_ASSIGN(pid_t certs,
                       SpawnServer({kCli, "certs", "--out", (open_dir / "credentials").string(),
                                    "--k8s-secrets", secrets.string()},
                                   (open_dir / "certs.log").string()));
  int status = -1;
  ASSERT_EQ(waitpid(certs, &status, 0), certs);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(open_dir / "certs.log");
  EXPECT_THAT(ReadFile(secrets), HasSubstr("kind: Secret"));

  const fs::path dir = cluster->dir();
  for (const char* sub :
       {"state/jobs", "state/checkpoints", "state/tensorboard", "logs", "credentials"}) {
    EXPECT_GT(Files(dir / sub), 0) << sub << " is empty: nothing tried there";
  }
  std::vector<fs::path> everything = Tree(dir);
  for (const fs::path& p : Tree(open_dir / "credentials")) everything.push_back(p);
  everything.push_back(secrets);
  EXPECT_THAT(OpenToOthers(everything), ::testing::IsEmpty());
  EXPECT_THAT(ReadableByNobody(everything), ::testing::IsEmpty())
      << "of " << everything.size() << " entries";
  // The open folder itself is readable (it is 0755): the child did try.
  EXPECT_THAT(ReadableByNobody({open_dir}), ::testing::ElementsAre(open_dir.string()));

  // A state folder loosened by hand is the owner's again once the coordinator restarts.
  for (const fs::path& p : Tree(dir / "state")) {
    fs::permissions(p, static_cast<fs::perms>(fs::is_directory(p) ? 0755 : 0644));
  }
  ASSERT_FALSE(OpenToOthers(Tree(dir / "state")).empty());
  ASSERT_OK(cluster->RestartCoordinator());
  EXPECT_THAT(OpenToOthers(Tree(dir / "state")), ::testing::IsEmpty());
  EXPECT_THAT(ReadFile(dir / "logs" / "coordinator.log"),
              HasSubstr("were open to other users; now the owner's only"));
  fs::remove_all(open_dir);
}

// A second coordinator started on a running one's --state_dir (a pod rescheduled while the
// old one still runs, a copy-pasted command) exits 1 naming the holder's pid, before it has
// recovered or written anything; the first one keeps its folder and goes on serving.
TEST(StateFolder, ASecondCoordinatorOnTheSameFolderExits1NamingTheHoldersPid) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(0));
  const std::string log = cluster->dir() + "/logs/second-coordinator.log";
  const std::string binary = BinaryPath("lockstep-coordinator");
  const std::string state = "--state_dir=" + cluster->dir() + "/state";
  const pid_t pid = fork();  // only async-signal-safe calls in the child (gRPC's threads)
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execl(binary.c_str(), binary.c_str(), "--insecure", "--listen=127.0.0.1:0", state.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << ReadFile(log);
  EXPECT_THAT(ReadFile(log), HasSubstr(absl::StrCat("is in use by another coordinator (pid ",
                                                    cluster->processes().pids()[0], " on ")));
  EXPECT_OK(cluster->Workers());
}

}  // namespace
}  // namespace lockstep::testing
