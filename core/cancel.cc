// CancelToken: a sticky cancellation signal, one per job (and one per preparation on a worker).
// Contract: cancel.h.
#include "core/cancel.h"

#include <cstdio>

namespace lockstep {

void CancelToken::Cancel(absl::Status why) {
  if (why.ok()) why = absl::CancelledError("cancelled");
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return;
  status_ = std::move(why);
  canceller_ = std::this_thread::get_id();
  while (!callbacks_.empty()) {
    auto it = callbacks_.begin();
    std::function<void()> f = std::move(it->second);
    running_ = it->first;
    callbacks_.erase(it);
    mu_.Unlock();
    f();
    mu_.Lock();
    running_ = 0;
  }
}

absl::Status CancelToken::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

bool CancelToken::WaitFor(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !status_.ok(); };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

CancelToken::Callback CancelToken::OnCancel(std::function<void()> f) const {
  {
    absl::MutexLock lock(&mu_);
    if (status_.ok()) {
      const int64_t id = next_id_++;
      callbacks_[id] = std::move(f);
      return Callback(this, id);
    }
  }
  f();
  return Callback();
}

void CancelToken::Unregister(int64_t id) const {
  absl::MutexLock lock(&mu_);
  callbacks_.erase(id);
  if (canceller_ == std::this_thread::get_id()) return;  // from inside a callback
  auto finished = [this, id]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return running_ != id; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&finished), callback_bound_)) {
    std::fprintf(stderr,
                 "error: a cancel callback has run for over %s (callbacks must be quick and "
                 "wait for nothing): unregistered without waiting for it to end\n",
                 absl::FormatDuration(callback_bound_).c_str());
  }
}

CancelToken::Callback& CancelToken::Callback::operator=(Callback&& o) noexcept {
  if (this != &o) {
    if (token_ != nullptr) token_->Unregister(id_);
    token_ = o.token_;
    id_ = o.id_;
    o.token_ = nullptr;
  }
  return *this;
}

CancelToken::Callback::~Callback() {
  if (token_ != nullptr) token_->Unregister(id_);
}

}  // namespace lockstep
