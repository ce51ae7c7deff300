// SerialExecutor: one thread that runs posted tasks in order. Contract: serial_executor.h.
#include "services/common/rpc/serial_executor.h"

namespace lockstep {

SerialExecutor::SerialExecutor() : thread_([this] { Loop(); }) {}

SerialExecutor::~SerialExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void SerialExecutor::Post(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

void SerialExecutor::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_ || !tasks_.empty(); };
    mu_.Await(absl::Condition(&ready));
    if (tasks_.empty()) return;  // stopping, nothing left
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    mu_.Unlock();
    task();
    mu_.Lock();
  }
}

}  // namespace lockstep
