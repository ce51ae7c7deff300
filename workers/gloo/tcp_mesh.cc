// TcpMesh: the CPU data plane's own transport. Contract: tcp_mesh.h.
#include "workers/gloo/tcp_mesh.h"

#include <endian.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep::gloo_internal {
namespace {

constexpr size_t kHeaderBytes = sizeof(uint64_t);
constexpr size_t kMaxIovecs = 64;  // per sendmsg: up to 32 queued messages in one call

bool WouldBlock(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

}  // namespace

absl::StatusOr<std::unique_ptr<TcpMesh>> TcpMesh::Create(int rank, int size,
                                                         std::vector<int> links) {
  const int abort_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (abort_fd < 0) {
    const int err = errno;
    for (int fd : links) {
      if (fd >= 0) ::close(fd);
    }
    return absl::InternalError(absl::StrCat("eventfd: ", strerror(err)));
  }
  for (int fd : links) {
    if (fd < 0) continue;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    const int one = 1;  // a segment's last bytes leave at once (fails harmlessly off TCP)
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return std::unique_ptr<TcpMesh>(new TcpMesh(rank, size, std::move(links), abort_fd));
}

TcpMesh::TcpMesh(int rank, int size, std::vector<int> links, int abort_fd)
    : rank_(rank), size_(size), links_(std::move(links)), abort_fd_(abort_fd) {}

TcpMesh::~TcpMesh() {
  for (int fd : links_) {
    if (fd >= 0) ::close(fd);
  }
  ::close(abort_fd_);
}

void TcpMesh::Abort() {
  if (aborted_.exchange(true)) return;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(abort_fd_, &one, sizeof(one));
  for (int fd : links_) {
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  }
}

TcpMesh::Transfer::Transfer(TcpMesh& mesh, int to, int from, SteadyTime deadline)
    : mesh_(mesh), to_(to), from_(from), deadline_(deadline) {}

void TcpMesh::Transfer::Send(const void* data, size_t bytes) {
  out_.push_back({htole64(bytes), static_cast<const char*>(data), bytes});
}

absl::Status TcpMesh::Transfer::Receive(void* data, size_t bytes) {
  bool received = false;
  while (!received) {
    absl::Status status = Step(static_cast<char*>(data), bytes, &received);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status TcpMesh::Transfer::Flush() {
  while (!out_.empty()) {
    absl::Status status = Step(nullptr, 0, nullptr);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status TcpMesh::Transfer::Step(char* in, size_t bytes, bool* received) {
  if (mesh_.aborted_) return Failed(absl::OkStatus());
  bool moved = false;
  absl::Status status = Write(&moved);
  if (status.ok() && received != nullptr) {
    status = Read(in, bytes, &moved, received);
  }
  if (!status.ok() || moved) return status;
  return Wait(received != nullptr);
}

absl::Status TcpMesh::Transfer::Write(bool* moved) {
  if (out_.empty() || !can_write_) return absl::OkStatus();
  std::array<iovec, kMaxIovecs> iov;
  size_t n = 0, offered = 0;
  for (Outgoing& m : out_) {
    if (n + 2 > iov.size()) break;
    size_t at = m.written;
    if (at < kHeaderBytes) {
      iov[n++] = {reinterpret_cast<char*>(&m.header) + at, kHeaderBytes - at};
      at = 0;
    } else {
      at -= kHeaderBytes;
    }
    if (at < m.bytes) iov[n++] = {const_cast<char*>(m.data) + at, m.bytes - at};
  }
  for (size_t i = 0; i < n; ++i) offered += iov[i].iov_len;
  msghdr msg = {};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = n;
  const ssize_t sent = ::sendmsg(mesh_.links_[to_], &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  // A short write filled the socket: the next one waits for poll's word that it has room.
  can_write_ = sent == static_cast<ssize_t>(offered);
  if (sent < 0) {
    if (WouldBlock(errno)) return absl::OkStatus();
    return Failed(
        absl::UnavailableError(absl::StrCat("send to rank ", to_, ": ", strerror(errno))));
  }
  *moved = *moved || sent > 0;
  for (size_t left = static_cast<size_t>(sent); left > 0;) {
    Outgoing& m = out_.front();
    const size_t take = std::min(left, kHeaderBytes + m.bytes - m.written);
    m.written += take;
    left -= take;
    if (m.written == kHeaderBytes + m.bytes) out_.pop_front();
  }
  return absl::OkStatus();
}

absl::Status TcpMesh::Transfer::Read(char* in, size_t bytes, bool* moved, bool* received) {
  if (!can_read_) return absl::OkStatus();
  std::array<iovec, 2> iov;
  size_t n = 0;
  if (in_got_ < kHeaderBytes) {
    iov[n++] = {reinterpret_cast<char*>(&in_header_) + in_got_, kHeaderBytes - in_got_};
  }
  const size_t body = in_got_ > kHeaderBytes ? in_got_ - kHeaderBytes : 0;
  if (body < bytes) iov[n++] = {in + body, bytes - body};
  msghdr msg = {};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = n;
  const ssize_t got = ::recvmsg(mesh_.links_[from_], &msg, MSG_DONTWAIT);
  // A short read emptied the socket: the next one waits for poll's word that data came.
  can_read_ = got == static_cast<ssize_t>(iov[0].iov_len + (n > 1 ? iov[1].iov_len : 0));
  if (got == 0) {
    return Failed(absl::UnavailableError(absl::StrCat("rank ", from_, " closed the connection")));
  }
  if (got < 0) {
    if (WouldBlock(errno)) return absl::OkStatus();
    return Failed(
        absl::UnavailableError(absl::StrCat("receive from rank ", from_, ": ", strerror(errno))));
  }
  *moved = true;
  in_got_ += static_cast<size_t>(got);
  if (in_got_ >= kHeaderBytes && le64toh(in_header_) != bytes) {
    return absl::InternalError(
        absl::StrCat("rank ", from_, " sent a message of ", le64toh(in_header_), " bytes where ",
                     bytes, " were expected (did the ranks call with different sizes?)"));
  }
  if (in_got_ == kHeaderBytes + bytes) {  // whole: the next message starts
    in_got_ = 0;
    *received = true;
  }
  return absl::OkStatus();
}

absl::Status TcpMesh::Transfer::Wait(bool reading) {
  std::array<pollfd, 3> fds;
  size_t n = 0;
  const short out = out_.empty() ? 0 : POLLOUT, in = reading ? POLLIN : 0;
  if (to_ == from_) {
    fds[n++] = {mesh_.links_[to_], static_cast<short>(out | in), 0};
  } else {
    if (out != 0) fds[n++] = {mesh_.links_[to_], out, 0};
    if (in != 0) fds[n++] = {mesh_.links_[from_], in, 0};
  }
  fds[n++] = {mesh_.abort_fd_, POLLIN, 0};
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Failed(absl::DeadlineExceededError(
          absl::StrCat("timed out waiting for rank ", reading ? from_ : to_,
                       reading ? absl::StrCat(" (", in_got_, " bytes of its message received)")
                               : std::string(" to take this rank's message"))));
    }
    const int ready =
        ::poll(fds.data(), n, static_cast<int>(std::min<int64_t>(left.count(), INT_MAX)));
    if (ready < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", strerror(errno)));
    }
    if (ready <= 0) continue;
    if (fds[n - 1].revents != 0) return Failed(absl::OkStatus());
    for (size_t i = 0; i + 1 < n; ++i) {
      const short ready_events = fds[i].revents, failed = POLLERR | POLLHUP;
      if (fds[i].fd == mesh_.links_[to_] && (ready_events & (POLLOUT | failed))) can_write_ = true;
      if (fds[i].fd == mesh_.links_[from_] && (ready_events & (POLLIN | failed))) can_read_ = true;
    }
    return absl::OkStatus();
  }
}

absl::Status TcpMesh::Transfer::Failed(absl::Status status) const {
  if (mesh_.aborted_ || status.ok()) return absl::AbortedError("aborted");
  return status;
}

}  // namespace lockstep::gloo_internal
