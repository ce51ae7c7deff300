// A streamed dataset larger than memory (docs/datasets.md, "Streamed datasets"): `lockstep
// train` (the worker and the coordinator in one process) trains on a record file three
// times larger than a memory limit put on its process (a memory cgroup), to the end, with
// the same checksum as an unlimited run. The cgroup counts the page cache the reads fill,
// so the limit is reached (memory.failcnt > 0) and the kernel reclaims what was read.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/testing.h"
#include "gtest/gtest.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kLimit = 256 * kMiB;
constexpr int kSide = 64;
constexpr int64_t kImageBytes = int64_t{kSide} * kSide * 3;
constexpr int64_t kTrainImages = 3 * kLimit / kImageBytes + 1024;  // over 3x the limit
constexpr int64_t kTestImages = 1000;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A .npy v1.0 header for `descr` of `shape`, padded to 64 bytes as numpy writes it.
std::string NpyHeader(const std::string& descr, const std::string& shape) {
  std::string dict =
      absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  const size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

// NAME.npy: `n` 64x64x3 uint8 images of a pattern that depends on the image and its label
// (i % 10), and NAME.labels.npy.
void WriteRecords(const fs::path& dir, const std::string& name, int64_t n) {
  std::ofstream images(dir / (name + ".npy"), std::ios::binary);
  images << NpyHeader("|u1", absl::StrCat("(", n, ", ", kSide, ", ", kSide, ", 3)"));
  std::ofstream labels(dir / (name + ".labels.npy"), std::ios::binary);
  labels << NpyHeader("<i4", absl::StrCat("(", n, ",)"));
  std::string image(kImageBytes, '\0');
  for (int64_t i = 0; i < n; ++i) {
    const int32_t label = static_cast<int32_t>(i % 10);
    for (int64_t j = 0; j < kImageBytes; ++j) {
      image[j] = static_cast<char>((j % (kSide * 3) < 24 * (label + 1) ? 200 : 30) + (i + j) % 17);
    }
    images.write(image.data(), kImageBytes);
    labels.write(reinterpret_cast<const char*>(&label), sizeof(label));
  }
  ASSERT_TRUE(images.good() && labels.good()) << "cannot write " << dir;
}

// Writes `path`'s pages to disk and drops them from the page cache, so that the run that
// reads it charges its pages to its own cgroup (pages stay charged to the cgroup that
// first touched them: this test's, for a file it just wrote).
void DropFromPageCache(const fs::path& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << "cannot open " << path;
  EXPECT_EQ(fdatasync(fd), 0) << path;
  EXPECT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0) << path;
  close(fd);
}

// How often the cgroup's usage hit its limit: v1's memory.failcnt, v2's "max" events.
int64_t TimesTheLimitWasHit(const fs::path& cgroup) {
  const std::string failcnt = ReadFile(cgroup / "memory.failcnt");
  if (!failcnt.empty()) return std::stoll(failcnt);
  std::istringstream events(ReadFile(cgroup / "memory.events"));
  std::string key;
  int64_t value = 0;
  while (events >> key >> value) {
    if (key == "max") return value;
  }
  return -1;
}

// A memory cgroup of the test's own limited to `bytes` (v1's memory controller or v2's);
// its folder, or empty with `why`.
fs::path MakeCgroup(int64_t bytes, std::string* why) {
  const std::string name = absl::StrCat("lockstep-stream-memory-", getpid());
  for (const auto& [root, limit_file] :
       {std::pair<fs::path, std::string>("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
        std::pair<fs::path, std::string>("/sys/fs/cgroup", "memory.max")}) {
    std::error_code ec;
    if (!fs::exists(root / "cgroup.procs", ec)) continue;
    if (limit_file == "memory.max" &&
        ReadFile(root / "cgroup.controllers").find("memory") == std::string::npos) {
      continue;
    }
    const fs::path dir = root / name;
    fs::create_directory(dir, ec);
    if (ec) {
      *why = absl::StrCat("cannot make ", dir.string(), ": ", ec.message());
      continue;
    }
    std::ofstream(dir / limit_file) << bytes;
    if (std::stoll(ReadFile(dir / limit_file)) != bytes) {
      *why = absl::StrCat(dir.string(), "/", limit_file, " did not take ", bytes);
      fs::remove(dir, ec);
      continue;
    }
    return dir;
  }
  if (why->empty()) *why = "no memory cgroup controller is mounted";
  return {};
}

struct TrainRun {
  int exit_code = -1;
  std::string out, err;
};

// `lockstep train --json SPEC`, inside `cgroup` unless it is empty.
TrainRun Train(const fs::path& dir, const fs::path& spec, const fs::path& cgroup) {
  const std::string cli = std::string(LOCKSTEP_BINARY_DIR) + "/clients/lockstep";
  const std::string join =
      cgroup.empty() ? "" : absl::StrCat("echo $$ > ", (cgroup / "cgroup.procs").string(), " && ");
  const std::string cmd =
      absl::StrCat("sh -c '", join, "exec ", cli, " train --json --threads 1 ", spec.string(),
                   "' >", (dir / "out").string(), " 2>", (dir / "err").string(), " </dev/null");
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(dir / "out"),
          ReadFile(dir / "err")};
}

TEST(StreamMemory, TrainsOnARecordFileThreeTimesAMemoryLimitToTheUnlimitedChecksum) {
  if (geteuid() != 0) GTEST_SKIP() << "making a memory cgroup takes root (CI runs as root)";
  std::string why;
  const fs::path cgroup = MakeCgroup(kLimit, &why);
  ASSERT_FALSE(cgroup.empty()) << why;
  const fs::path dir =
      fs::temp_directory_path() / absl::StrCat("lockstep-stream-memory-", getpid());
  fs::create_directories(dir);
  WriteRecords(dir, "train", kTrainImages);
  WriteRecords(dir, "test", kTestImages);
  for (const char* name : {"train.npy", "test.npy"}) DropFromPageCache(dir / name);
  const int64_t dataset = fs::file_size(dir / "train.npy");
  ASSERT_GE(dataset, 3 * kLimit);
  // One epoch; average pooling makes the 64x64x3 images 8x8x3 for a dense layer.
  const fs::path spec = dir / "spec.yaml";
  std::ofstream(spec) << absl::StrFormat(R"(model:
  input_shape: [%d, %d, 3]
  layers:
    - avg_pool: {window_shape: [8, 8], strides: [8, 8]}
    - flatten
    - dense: {features: 10}
optimizer: {kind: adam, learning_rate: 0.01}
dataset:
  format: records
  train_path: %s
  test_path: %s
  preprocess: [{random_crop: {size: %d, padding: 4}}, {horizontal_flip: {}}]
  stream: {threads: 1, batches_ahead: 2}
global_batch_size: 256
epochs: 1
eval: {batch_size: 500}
seed: 1
)",
                                         kSide, kSide, (dir / "train.npy").string(),
                                         (dir / "test.npy").string(), kSide);

  const TrainRun limited = Train(dir, spec, cgroup);
  const std::string v1_usage = ReadFile(cgroup / "memory.max_usage_in_bytes");
  const int64_t hits = TimesTheLimitWasHit(cgroup);
  std::error_code ec;
  fs::remove(cgroup, ec);  // empty again once the process exited
  ASSERT_EQ(limited.exit_code, 0) << limited.err;
  const TrainRun unlimited = Train(dir, spec, {});
  ASSERT_EQ(unlimited.exit_code, 0) << unlimited.err;
  fs::remove_all(dir, ec);

  const nlohmann::json a = nlohmann::json::parse(limited.out);
  const nlohmann::json b = nlohmann::json::parse(unlimited.out);
  EXPECT_EQ(a["param_checksum"], b["param_checksum"]);
  EXPECT_EQ(a["test_accuracy"], b["test_accuracy"]);
  EXPECT_GT(a["test_accuracy"].get<double>(), 0.5) << "the images tell their labels apart";
  std::printf(
      "dataset %lld MiB under a %lld MiB limit: peak usage %s bytes, limit reached %lld times\n",
      static_cast<long long>(dataset / kMiB), static_cast<long long>(kLimit / kMiB),
      v1_usage.empty() ? "(v2: not kept)" : v1_usage.substr(0, v1_usage.size() - 1).c_str(),
      static_cast<long long>(hits));
  EXPECT_GT(hits, 0) << "the limit was never reached: the test proves nothing";
}

}  // namespace
}  // namespace lockstep::testing
