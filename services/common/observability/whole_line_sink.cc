// WholeLineSink: the servers' log sink. Contract: whole_line_sink.h.
#include "services/common/observability/whole_line_sink.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace lockstep {

bool WholeLineSink::WriteWhole(const char* data, size_t size) {
  struct stat st;
  const bool regular = fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
  const off_t before = regular ? lseek(fd_, 0, SEEK_CUR) : -1;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(fd_, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      if (done > 0 && before >= 0) {
        // Cut back the torn part (O_APPEND or not, the line started at `before`).
        if (ftruncate(fd_, before) == 0) lseek(fd_, before, SEEK_SET);
      }
      errno = err;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

void WholeLineSink::sink_it_(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t line;
  formatter_->format(msg, line);
  if (lost_ > 0) {
    const std::string note =
        absl::StrCat("[log] ", lost_, " lines were lost: ", std::strerror(lost_errno_), "\n");
    if (!WriteWhole(note.data(), note.size())) {
      ++lost_;
      return;
    }
    lost_ = 0;
  }
  if (!WriteWhole(line.data(), line.size())) {
    ++lost_;
    lost_errno_ = errno;
  }
}

void UseWholeLineLogger() {
  auto logger =
      std::make_shared<spdlog::logger>("", std::make_shared<WholeLineSink>(STDOUT_FILENO));
  logger->set_level(spdlog::default_logger()->level());
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace lockstep
