// WholeLineSink: the servers' log sink. Each formatted line goes out in one write(2) to a
// file descriptor (stdout), whole or not at all: a short write to a regular file (a full
// disk) is cut back, so that no torn line stays, and the lines the disk refused are
// counted. Writing resumes by itself once there is room, the first line then preceded by
// one saying how many were lost and why. (spdlog's stdout sink leaves a torn line behind
// and the stream's error flag set.)
//
// Thread safety: spdlog's base_sink with a mutex.
#ifndef LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_WHOLE_LINE_SINK_H_
#define LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_WHOLE_LINE_SINK_H_

#include <spdlog/sinks/base_sink.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace lockstep {

class WholeLineSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // Does not own `fd`.
  explicit WholeLineSink(int fd) : fd_(fd) {}

  int64_t lost() const { return lost_; }  // lines refused since the last one written

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override {}

 private:
  // Writes all of `data` or (cut back) nothing; false with errno set.
  bool WriteWhole(const char* data, size_t size);

  const int fd_;
  int64_t lost_ = 0;
  int lost_errno_ = 0;
};

// The default logger, writing through a WholeLineSink on stdout (servers' main).
void UseWholeLineLogger();

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_WHOLE_LINE_SINK_H_
