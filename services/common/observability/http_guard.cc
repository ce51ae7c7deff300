// HttpGuard: per-request deadlines and per-address caps for libmicrohttpd listeners.
// Contract: http_guard.h.
#include "services/common/observability/http_guard.h"

#include <microhttpd.h>
#include <sys/socket.h>

#include <algorithm>

namespace lockstep {

struct HttpGuard::Connection {
  int fd;
  absl::Time deadline;
  bool shut = false;
};

struct HttpGuard::Hooks {
  // MHD_OPTION_NOTIFY_CONNECTION: a connection accepted (before its TLS handshake) or
  // about to be closed (its descriptor still open).
  static void Notify(void* cls, MHD_Connection* connection, void** socket_context,
                     MHD_ConnectionNotificationCode toe) {
    auto* guard = static_cast<HttpGuard*>(cls);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
      const MHD_ConnectionInfo* info =
          MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
      auto* c =
          new Connection{info->connect_fd, guard->clock_->Now() + guard->limits_.header_timeout};
      *socket_context = c;
      absl::MutexLock lock(&guard->mu_);
      guard->open_.insert(c);
      return;
    }
    auto* c = static_cast<Connection*>(*socket_context);
    if (c == nullptr) return;
    {
      absl::MutexLock lock(&guard->mu_);
      guard->open_.erase(c);
    }
    delete c;
    *socket_context = nullptr;
  }

  // MHD_OPTION_NOTIFY_COMPLETED: a request answered (or given up); the next on this
  // connection has header_timeout from now.
  static void Completed(void* cls, MHD_Connection* connection, void** request,
                        MHD_RequestTerminationCode) {
    auto* guard = static_cast<HttpGuard*>(cls);
    if (guard->completed_) guard->completed_(request);
    guard->Restart(connection, guard->limits_.header_timeout);
  }
};

HttpGuard::HttpGuard(const HttpLimits& limits, Completed completed, Clock* clock,
                     absl::Duration sweep_every)
    : limits_(limits), completed_(std::move(completed)), clock_(clock) {
  const auto idle_seconds = static_cast<unsigned int>(std::max<int64_t>(
      1, absl::ToInt64Seconds(absl::Ceil(limits.idle_timeout, absl::Seconds(1)))));
  options_.reset(new MHD_OptionItem[]{
      {MHD_OPTION_NOTIFY_CONNECTION, reinterpret_cast<intptr_t>(&Hooks::Notify), this},
      {MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(&Hooks::Completed), this},
      {MHD_OPTION_CONNECTION_TIMEOUT, idle_seconds, nullptr},
      {MHD_OPTION_CONNECTION_LIMIT, std::max(1, limits.max_connections), nullptr},
      {MHD_OPTION_PER_IP_CONNECTION_LIMIT, std::max(1, limits.max_per_ip), nullptr},
      {MHD_OPTION_END, 0, nullptr}});
  sweeper_ = std::thread([this, sweep_every] { Loop(sweep_every); });
}

HttpGuard::~HttpGuard() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  sweeper_.join();
}

void HttpGuard::HeaderReceived(MHD_Connection* connection) {
  Restart(connection, limits_.body_timeout);
}

void HttpGuard::Restart(MHD_Connection* connection, absl::Duration wait) {
  const MHD_ConnectionInfo* info =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  if (info == nullptr || info->socket_context == nullptr) return;
  const absl::Time deadline = clock_->Now() + wait;
  absl::MutexLock lock(&mu_);
  static_cast<Connection*>(info->socket_context)->deadline = deadline;
}

void HttpGuard::Sweep() {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  for (Connection* c : open_) {
    if (c->shut || now < c->deadline) continue;
    // Under mu_: libmicrohttpd has not reported it closed, so the descriptor is still its.
    shutdown(c->fd, SHUT_RDWR);
    c->shut = true;
  }
}

void HttpGuard::Loop(absl::Duration every) {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      // Woken early only to stop: a sweep's period, not a synchronization.
      mu_.AwaitWithTimeout(absl::Condition(&stop_), every);
      if (stop_) return;
    }
    Sweep();
  }
}

}  // namespace lockstep
