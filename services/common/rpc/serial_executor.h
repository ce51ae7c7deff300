// SerialExecutor: one thread that runs posted tasks in order. Where the gRPC callback API
// hands work to code that may block (a training step), the work goes here so that gRPC's
// own threads never block. Thread-safe; the destructor runs the tasks already posted,
// then joins the thread.
#ifndef LOCKSTEP_SERVICES_COMMON_RPC_SERIAL_EXECUTOR_H_
#define LOCKSTEP_SERVICES_COMMON_RPC_SERIAL_EXECUTOR_H_

#include <deque>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace lockstep {

class SerialExecutor {
 public:
  SerialExecutor();
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  void Post(std::function<void()> task);

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_RPC_SERIAL_EXECUTOR_H_
