// HttpGuard: what keeps slow or greedy clients from holding a libmicrohttpd listener (the
// /metrics listener, the dashboard). libmicrohttpd's own timeout is one of inactivity: a
// client that trickles a header line every few seconds keeps its connection forever, and
// enough of them fill every slot. The guard gives each request deadlines instead:
//
//   header: the request's header (and, on a new connection, the TLS handshake before it)
//           arrives whole within `header_timeout` of the connection's opening or of the
//           previous answer on it (keep-alive);
//   body:   its body arrives and its answer is sent within `body_timeout` of its header;
//
// and past its deadline a connection is shut down (shutdown(2); libmicrohttpd then closes
// it), however busy it keeps itself. It also caps the connections from one IP address
// (`max_per_ip`: more are closed at once), so that one host cannot take every slot of
// `max_connections`.
//
// A listener wires it in with options() (passed with MHD_OPTION_ARRAY), calls
// HeaderReceived from its access handler's first call for a request, and gives its own
// request-completed callback to the constructor (the guard's takes libmicrohttpd's one
// slot and chains to it). A thread of the guard's sweeps the deadlines, every
// `sweep_every`. Thread-safe.
#ifndef LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_HTTP_GUARD_H_
#define LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_HTTP_GUARD_H_

#include <functional>
#include <memory>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/clock.h"

struct MHD_Connection;  // libmicrohttpd's
struct MHD_OptionItem;

namespace lockstep {

struct HttpLimits {
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration body_timeout = absl::Seconds(30);
  // A connection silent this long is closed (whole seconds, at least 1): one kept alive
  // and not used again.
  absl::Duration idle_timeout = absl::Seconds(10);
  int max_connections = 256;
  int max_per_ip = 64;
};

class HttpGuard {
 public:
  // What the listener does when a request ends (libmicrohttpd's request-completed
  // callback): frees its per-request state `*request`. May be empty.
  using Completed = std::function<void(void** request)>;

  // Sweeps the deadlines with a thread of its own every `sweep_every`, on `clock` (not
  // owned; it must outlive the guard).
  HttpGuard(const HttpLimits& limits, Completed completed, Clock* clock = Clock::Real(),
            absl::Duration sweep_every = absl::Milliseconds(200));
  ~HttpGuard();
  HttpGuard(const HttpGuard&) = delete;
  HttpGuard& operator=(const HttpGuard&) = delete;

  // The options that wire the guard into a daemon (MHD_OPTION_ARRAY), ending with
  // MHD_OPTION_END; valid while the guard is. The guard must outlive the daemon.
  const MHD_OptionItem* options() const { return options_.get(); }

  // The access handler's first call for a request: its header is whole.
  void HeaderReceived(MHD_Connection* connection);

 private:
  struct Connection;
  struct Hooks;  // libmicrohttpd's callbacks (http_guard.cc)
  friend struct Hooks;
  // Restarts `connection`'s deadline at `wait` from now.
  void Restart(MHD_Connection* connection, absl::Duration wait);
  // Shuts down every connection past its deadline now.
  void Sweep();
  void Loop(absl::Duration every);

  const HttpLimits limits_;
  const Completed completed_;
  Clock* const clock_;
  std::unique_ptr<MHD_OptionItem[]> options_;

  // Held while a connection is shut down and while libmicrohttpd reports one closed (before
  // it closes the descriptor): a descriptor shut down is never one reused by then.
  absl::Mutex mu_;
  std::set<Connection*> open_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sweeper_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_HTTP_GUARD_H_
