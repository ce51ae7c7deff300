// Test helpers shared by the C++ tests: golden-file paths, status matchers, tolerances.
#ifndef LOCKSTEP_CORE_TESTING_H_
#define LOCKSTEP_CORE_TESTING_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/status_macros.h"

namespace lockstep::testing {

// The source tree: $LOCKSTEP_SOURCE_DIR, else the one compiled in (so that a test binary
// built here can run from another checkout, e.g. on a GPU machine).
inline std::string SourcePath(const std::string& rel) {
  const char* root = std::getenv("LOCKSTEP_SOURCE_DIR");
  return std::string(root != nullptr && root[0] != '\0' ? root : LOCKSTEP_SOURCE_DIR) + "/" + rel;
}

// A fresh directory under the system's temporary one, removed with everything in it when
// the object goes: for tests that write files.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    std::string templ = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
    if (mkdtemp(templ.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << templ << " failed";
    path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes `bytes` to the file `name` in the directory; returns its path.
  std::string Write(const std::string& name, const std::string& bytes) const {
    const std::string path = (path_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

 private:
  std::filesystem::path path_;
};

// The golden files' folder: tests/golden/, or $LOCKSTEP_GOLDEN_DIR where set (a folder of
// files drawn for a fuzzing session by tools/reference/golden_random.py --out).
inline std::string GoldenDir() {
  const char* dir = std::getenv("LOCKSTEP_GOLDEN_DIR");
  return dir != nullptr && *dir != '\0' ? std::string(dir) : SourcePath("tests/golden");
}

inline std::string GoldenPath(const std::string& name) { return GoldenDir() + "/" + name; }

// ||a - b|| / ||b|| (L2), the per-tensor comparison the golden tests use.
inline double RelativeL2(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// A file's bytes ("" if it cannot be read).
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline double MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::fabs(double{a[i]} - b[i]));
  return m;
}

namespace internal {
inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace internal

MATCHER_P2(StatusIs, code, message_matcher, "") {
  const absl::Status& st = internal::GetStatus(arg);
  if (st.code() != code) {
    *result_listener << "code is " << absl::StatusCodeToString(st.code()) << ": " << st.message();
    return false;
  }
  return ::testing::ExplainMatchResult(message_matcher, std::string(st.message()), result_listener);
}

inline auto IsOk() { return StatusIs(absl::StatusCode::kOk, ::testing::_); }

}  // namespace lockstep::testing

// Evaluates `expr` once.
#define ASSERT_OK(expr)                                                         \
  do {                                                                          \
    const absl::Status ls_st_ = ::lockstep::testing::internal::GetStatus(expr); \
    ASSERT_TRUE(ls_st_.ok()) << ls_st_;                                         \
  } while (0)
#define EXPECT_OK(expr)                                                         \
  do {                                                                          \
    const absl::Status ls_st_ = ::lockstep::testing::internal::GetStatus(expr); \
    EXPECT_TRUE(ls_st_.ok()) << ls_st_;                                         \
  } while (0)
#define ASSERT_OK_AND_ASSIGN(lhs, rexpr)                                                 \
  auto LS_CONCAT_(ls_t_, __LINE__) = (rexpr);                                            \
  ASSERT_TRUE(LS_CONCAT_(ls_t_, __LINE__).ok()) << LS_CONCAT_(ls_t_, __LINE__).status(); \
  lhs = std::move(LS_CONCAT_(ls_t_, __LINE__)).value()

#endif  // LOCKSTEP_CORE_TESTING_H_
