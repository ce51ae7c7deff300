// TcpMesh::Transfer between two ranks as threads over a socketpair: messages both ways
// larger than the socket buffers, exact reads across calls, and the errors a collective
// maps (a wrong length, the deadline, an abort, a peer gone).
#include "workers/gloo/tcp_mesh.h"

#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "core/testing.h"

namespace lockstep::gloo_internal {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::_;
using ::testing::HasSubstr;

// The two ranks of a job whose one link is a socketpair.
std::vector<std::unique_ptr<TcpMesh>> Pair() {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  std::vector<std::unique_ptr<TcpMesh>> ranks;
  for (int r = 0; r < 2; ++r) {
    std::vector<int> links = {-1, -1};
    links[1 - r] = fds[r];
    absl::StatusOr<std::unique_ptr<TcpMesh>> mesh = TcpMesh::Create(r, 2, links);
    EXPECT_TRUE(mesh.ok()) << mesh.status();
    ranks.push_back(*std::move(mesh));
  }
  return ranks;
}

SteadyTime In(std::chrono::milliseconds ms) { return std::chrono::steady_clock::now() + ms; }

TEST(TcpMeshTest, BothRanksSendMoreThanTheSocketsHoldAtOnce) {
  // Each rank queues 8 MiB before it reads anything: the transfer writes while it waits to
  // read, so neither blocks on the other's full buffer.
  auto ranks = Pair();
  constexpr size_t kBytes = 8 << 20;
  std::vector<std::vector<char>> out(2, std::vector<char>(kBytes)), in = out;
  for (size_t i = 0; i < kBytes; ++i) {
    out[0][i] = static_cast<char>(i * 7);
    out[1][i] = static_cast<char>(i * 13 + 1);
  }
  std::vector<absl::Status> received(2), flushed(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      TcpMesh::Transfer transfer(*ranks[r], 1 - r, 1 - r, In(std::chrono::seconds(30)));
      transfer.Send(out[r].data(), kBytes / 2);
      transfer.Send(out[r].data() + kBytes / 2, kBytes / 2);
      received[r] = transfer.Receive(in[r].data(), kBytes / 2);
      if (received[r].ok()) received[r] = transfer.Receive(in[r].data() + kBytes / 2, kBytes / 2);
      flushed[r] = transfer.Flush();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_OK(received[r]);
    ASSERT_OK(flushed[r]);
    EXPECT_TRUE(in[r] == out[1 - r]) << "rank " << r << " read other bytes than were sent";
  }
}

TEST(TcpMeshTest, ACallReadsOnlyItsOwnMessages) {
  // Rank 0 sends two calls' messages before rank 1 reads either: each of rank 1's
  // transfers reads its own, an empty message included.
  auto ranks = Pair();
  const std::vector<int> first = {1, 2, 3}, second = {4, 5};
  {
    TcpMesh::Transfer call(*ranks[0], 1, 1, In(std::chrono::seconds(10)));
    call.Send(first.data(), first.size() * sizeof(int));
    call.Send(nullptr, 0);
    ASSERT_OK(call.Flush());
  }
  {
    TcpMesh::Transfer call(*ranks[0], 1, 1, In(std::chrono::seconds(10)));
    call.Send(second.data(), second.size() * sizeof(int));
    ASSERT_OK(call.Flush());
  }
  std::vector<int> got(3);
  {
    TcpMesh::Transfer call(*ranks[1], 0, 0, In(std::chrono::seconds(10)));
    ASSERT_OK(call.Receive(got.data(), 3 * sizeof(int)));
    ASSERT_OK(call.Receive(nullptr, 0));
  }
  EXPECT_EQ(got, first);
  got.assign(2, 0);
  TcpMesh::Transfer call(*ranks[1], 0, 0, In(std::chrono::seconds(10)));
  ASSERT_OK(call.Receive(got.data(), 2 * sizeof(int)));
  EXPECT_EQ(got, second);
}

TEST(TcpMeshTest, AMessageOfAnotherLengthIsAnError) {
  auto ranks = Pair();
  std::vector<char> bytes(100);
  TcpMesh::Transfer sender(*ranks[0], 1, 1, In(std::chrono::seconds(10)));
  sender.Send(bytes.data(), 100);
  ASSERT_OK(sender.Flush());
  std::vector<char> in(200);
  TcpMesh::Transfer receiver(*ranks[1], 0, 0, In(std::chrono::seconds(10)));
  EXPECT_THAT(receiver.Receive(in.data(), 200),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("rank 0 sent a message of 100 bytes where 200 were expected")));
}

TEST(TcpMeshTest, ASilentPeerIsADeadline) {
  auto ranks = Pair();
  char c;
  TcpMesh::Transfer transfer(*ranks[0], 1, 1, In(std::chrono::milliseconds(50)));
  EXPECT_THAT(transfer.Receive(&c, 1),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("waiting for rank 1")));
}

TEST(TcpMeshTest, AbortEndsAWaitAndEveryLaterOneAndThePeerSeesIt) {
  auto ranks = Pair();
  char c;
  absl::Status waited;
  std::thread waiter([&] {
    TcpMesh::Transfer transfer(*ranks[0], 1, 1, In(std::chrono::seconds(60)));
    waited = transfer.Receive(&c, 1);
  });
  ranks[0]->Abort();  // before or during the wait: either way it ends now
  waiter.join();
  EXPECT_THAT(waited, StatusIs(absl::StatusCode::kAborted, _));
  TcpMesh::Transfer later(*ranks[0], 1, 1, In(std::chrono::seconds(60)));
  later.Send(&c, 1);
  EXPECT_THAT(later.Flush(), StatusIs(absl::StatusCode::kAborted, _));
  ranks[0]->Abort();  // idempotent
  // The links were shut down: the peer's wait ends at once, not at its deadline.
  TcpMesh::Transfer peer(*ranks[1], 0, 0, In(std::chrono::seconds(60)));
  EXPECT_THAT(peer.Receive(&c, 1),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 0 closed the connection")));
}

TEST(TcpMeshTest, APeerGoneIsUnavailable) {
  auto ranks = Pair();
  ranks[1].reset();
  char c = 0;
  TcpMesh::Transfer transfer(*ranks[0], 1, 1, In(std::chrono::seconds(60)));
  EXPECT_THAT(transfer.Receive(&c, 1), StatusIs(absl::StatusCode::kUnavailable, _));
  TcpMesh::Transfer writer(*ranks[0], 1, 1, In(std::chrono::seconds(60)));
  writer.Send(&c, 1);
  EXPECT_THAT(writer.Flush(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("send to rank 1")));
}

}  // namespace
}  // namespace lockstep::gloo_internal
