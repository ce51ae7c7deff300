// TcpMesh: the CPU data plane's own transport, one connected TCP socket to every peer of
// a job (made, and authenticated, by auth_transport.h's JoinMesh), and Transfer, the
// traffic of one collective call over it: messages written to one neighbour while
// messages are read from another (the same one for two ranks), driven by one poll(2) loop
// on the caller's thread, bounded by a deadline and ended at once by Abort.
//
// On the wire each message is its length (8 bytes, little-endian) and its bytes; the
// receiver names the length it expects, so that ranks calling with different sizes fail
// (INTERNAL) instead of misreading the stream. Messages of one call are read exactly, never
// past its last byte, so that a fast peer's next call waits in the socket for the next
// Transfer. Nothing else is on the wire: no handshakes per message, no threads.
#ifndef LOCKSTEP_WORKERS_GLOO_TCP_MESH_H_
#define LOCKSTEP_WORKERS_GLOO_TCP_MESH_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lockstep::gloo_internal {

using SteadyTime = std::chrono::steady_clock::time_point;

// Thread safety: Abort from any thread; one Transfer at a time per mesh otherwise.
class TcpMesh final {
 public:
  // `links[p]`: a connected stream socket to rank p (-1 at `rank`), owned from now on.
  // Errors: INTERNAL when the abort's eventfd cannot be made (the links are closed).
  static absl::StatusOr<std::unique_ptr<TcpMesh>> Create(int rank, int size,
                                                         std::vector<int> links);
  ~TcpMesh();  // closes the links: peers reading from this rank see the end of the stream
  TcpMesh(const TcpMesh&) = delete;
  TcpMesh& operator=(const TcpMesh&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Ends the Transfer in flight at once, and every later one (ABORTED), and shuts the links
  // down so that the peers' transfers fail at once (UNAVAILABLE) rather than at their
  // deadlines. The sockets stay open (their numbers are not reused) until destruction.
  // Thread-safe and idempotent.
  void Abort();

  // One call's messages to rank `to` and from rank `from`. Send queues a message; every
  // method that waits also writes what is queued, so that the ranks of a ring never wait
  // on each other's full socket buffers. Errors from every method: DEADLINE_EXCEEDED at the
  // deadline, UNAVAILABLE when a peer closed its end or the socket failed, ABORTED after
  // Abort, INTERNAL when a message's length is not the one expected. After an error the
  // transfer (and, its stream being out of step, the mesh) is unusable.
  class Transfer final {
   public:
    Transfer(TcpMesh& mesh, int to, int from, SteadyTime deadline);

    // Queues `bytes` at `data` for `to`; `data` must stay unchanged until the message has
    // been written (at the latest by Flush).
    void Send(const void* data, size_t bytes);
    // Reads the next message from `from` into `data`, which must hold exactly `bytes`.
    absl::Status Receive(void* data, size_t bytes);
    // Writes every queued message.
    absl::Status Flush();

   private:
    struct Outgoing {
      uint64_t header;  // the length, little-endian
      const char* data;
      size_t bytes;
      size_t written = 0;  // of header and data together
    };
    // One round of progress: writes what the socket takes, reads into `in` unless
    // `received` is null, and waits (poll) only when neither moved. Sets *received once
    // the message is whole.
    absl::Status Step(char* in, size_t bytes, bool* received);
    absl::Status Write(bool* moved);
    absl::Status Read(char* in, size_t bytes, bool* moved, bool* received);
    absl::Status Wait(bool reading);
    absl::Status Failed(absl::Status status) const;  // ABORTED instead once aborted

    TcpMesh& mesh_;
    const int to_, from_;
    const SteadyTime deadline_;
    std::deque<Outgoing> out_;
    uint64_t in_header_ = 0;
    size_t in_got_ = 0;  // bytes of the current incoming message, header included
    // Whether a write (read) may move bytes without poll's word first: false after one
    // that was short, so that a full (empty) socket costs no failing system call.
    bool can_write_ = true, can_read_ = true;
  };

 private:
  TcpMesh(int rank, int size, std::vector<int> links, int abort_fd);

  const int rank_;
  const int size_;
  const std::vector<int> links_;
  const int abort_fd_;  // an eventfd, readable once aborted
  std::atomic<bool> aborted_ = false;
};

}  // namespace lockstep::gloo_internal

#endif  // LOCKSTEP_WORKERS_GLOO_TCP_MESH_H_
