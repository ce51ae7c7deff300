// CancelToken: a sticky cancellation signal, one per job (and one per preparation on a
// worker). Once cancelled it stays so, with the first reason given. Work in flight learns
// of it through a callback (OnCancel: cancel a gRPC call, break a stream); work started
// later sees status() and fails at once. Thread-safe.
#ifndef LOCKSTEP_CORE_CANCEL_H_
#define LOCKSTEP_CORE_CANCEL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep {

class CancelToken {
 public:
  CancelToken() = default;
  // `callback_bound`: how long unregistering waits for a running callback (Callback).
  explicit CancelToken(absl::Duration callback_bound) : callback_bound_(callback_bound) {}
  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  // Cancels with `why` (CANCELLED if `why` is OK); later calls change nothing. Runs the
  // registered callbacks on this thread before returning.
  void Cancel(absl::Status why);
  // OK until cancelled, then the reason.
  absl::Status status() const;
  bool cancelled() const { return !status().ok(); }
  // Waits until cancelled or `timeout` passes; true if cancelled.
  bool WaitFor(absl::Duration timeout) const;

  // A registered callback; unregisters when destroyed, waiting for the callback if it is
  // running on another thread, so that what it touches may be destroyed next. The wait is
  // bounded (the token's callback_bound): a callback that overran it broke the contract
  // below (quick, waiting for nothing); the overrun is reported on stderr and the
  // destructor returns.
  class Callback {
   public:
    Callback() = default;
    Callback(Callback&& o) noexcept : token_(o.token_), id_(o.id_) { o.token_ = nullptr; }
    Callback& operator=(Callback&& o) noexcept;
    ~Callback();

   private:
    friend class CancelToken;
    Callback(const CancelToken* token, int64_t id) : token_(token), id_(id) {}
    const CancelToken* token_ = nullptr;
    int64_t id_ = 0;
  };
  // Runs `f` once on cancellation; at once, on this thread, if already cancelled. `f`
  // must be quick and must not wait for anything the cancelling thread may hold.
  [[nodiscard]] Callback OnCancel(std::function<void()> f) const;

 private:
  void Unregister(int64_t id) const;

  const absl::Duration callback_bound_ = absl::Seconds(10);
  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  // Registering a callback is not a change of the token's state: OnCancel is const.
  mutable std::map<int64_t, std::function<void()>> callbacks_ ABSL_GUARDED_BY(mu_);
  mutable int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;  // the callback Cancel is running, if any
  std::thread::id canceller_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_CANCEL_H_
