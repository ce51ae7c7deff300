// The authenticated pairing and the in-place retry of GlooCollective's bootstrap, with
// ranks as threads on loopback: stray and hostile connections to the ranks' listeners
// during bootstrap are dropped without costing an attempt, and a transport failure of one
// attempt is retried in place by every rank.
#include "workers/gloo/auth_transport.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/testing.h"
#include "workers/gloo/gloo_collective.h"
#include "workers/gloo/stray_connection_store.h"

namespace lockstep {
namespace {

using ::lockstep::testing::StatusIs;
using ::lockstep::testing::StrayConnectionStore;
using ::testing::HasSubstr;

// Counts the retries reported through GlooOptions.on_retry.
struct Retries {
  absl::Mutex mu;
  std::vector<std::string> reasons ABSL_GUARDED_BY(mu);
  int count() {
    absl::MutexLock lock(&mu);
    return static_cast<int>(reasons.size());
  }
};

GlooOptions Loopback(const std::string& prefix, Retries* retries) {
  GlooOptions options;
  options.hostname = "127.0.0.1";
  options.prefix = prefix;
  options.connect_timeout = absl::Seconds(20);
  options.on_retry = [retries](int attempt, const absl::Status& why) {
    absl::MutexLock lock(&retries->mu);
    retries->reasons.push_back(absl::StrCat(attempt, ": ", why.message()));
  };
  return options;
}

// Creates all `size` ranks at once and all-reduces rank+1 on each: every rank must end
// with 1+2+...+size.
void ExpectJobWorks(int size, Store* store, const GlooOptions& options) {
  std::vector<absl::StatusOr<std::unique_ptr<Collective>>> job(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] { job[r] = GlooCollective::Create(r, size, store, options); });
  }
  for (std::thread& t : threads) t.join();
  threads.clear();
  for (int r = 0; r < size; ++r)
    ASSERT_TRUE(job[r].ok()) << "rank " << r << ": " << job[r].status();
  std::vector<std::vector<float>> data(size);
  std::vector<absl::Status> statuses(size);
  for (int r = 0; r < size; ++r) {
    data[r].assign(1000, static_cast<float>(r + 1));
    threads.emplace_back([&, r] {
      statuses[r] =
          (*job[r])->AllReduceSum(data[r].data(), data[r].size(), {.timeout = absl::Seconds(10)});
    });
  }
  for (std::thread& t : threads) t.join();
  const float sum = static_cast<float>(size * (size + 1) / 2);
  for (int r = 0; r < size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(data[r], std::vector<float>(1000, sum)) << "rank " << r;
  }
}

TEST(GlooAuthenticatedPairing, StrayConnectionsAtTheListenersCostNoAttempt) {
  // Before any peer connects, each listener has random bytes, a half-open connection, a
  // plausible peer address, a wrong token and an immediate close queued ahead of it.
  // A listener that took the first connection as the peer (as Gloo's own transport does)
  // would take the first of them and refuse the real one.
  MemoryStore memory;
  StrayConnectionStore store(&memory);
  Retries retries;
  ExpectJobWorks(3, &store, Loopback("stray", &retries));
  EXPECT_GE(store.connected(), 5) << "the attack reached no listener";
  EXPECT_EQ(retries.count(), 0);
  // The listeners bind the address the ranks were given, not every interface.
  EXPECT_EQ(store.hosts(), std::set<std::string>{"127.0.0.1"});
}

TEST(GlooAuthenticatedPairing, MoreHalfOpenConnectionsThanSlotsStillLetThePeerIn) {
  // Twenty silent connections to rank 1's listener first (rank 0 reads its address, and so
  // floods it, before connecting; rank 1 connects to nobody, so never reads rank 0's): the
  // oldest are evicted, and the real peer, connecting last, gets in all the same.
  MemoryStore memory;
  class Flood final : public Store {
   public:
    explicit Flood(Store* base) : base_(base) {}
    ~Flood() override {
      for (int fd : fds_) ::close(fd);
    }
    absl::Status Set(const std::string& k, const std::string& v) override {
      return base_->Set(k, v);
    }
    absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
      absl::StatusOr<std::string> value = base_->Get(key, timeout);
      const size_t record = StrayConnectionStore::kAddressBytes;
      if (value.ok() && (key == "flood/0/0" || key == "flood/0/1") && value->size() == record) {
        absl::MutexLock lock(&mu_);
        sockaddr_storage addr;
        std::memcpy(&addr, value->data(), sizeof(addr));
        for (int i = 0; i < 20; ++i) {
          const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
          if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(sockaddr_in)) == 0) {
            ++connected_;
          }
          fds_.push_back(fd);
        }
      }
      return value;
    }
    int connected() {
      absl::MutexLock lock(&mu_);
      return connected_;
    }

   private:
    Store* base_;
    absl::Mutex mu_;
    std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
    int connected_ ABSL_GUARDED_BY(mu_) = 0;
  } store(&memory);
  Retries retries;
  ExpectJobWorks(2, &store, Loopback("flood", &retries));
  EXPECT_EQ(retries.count(), 0);
  EXPECT_GE(store.connected(), 20);
}

TEST(GlooBootstrapRetry, ARefusedConnectIsRetriedInPlaceByEveryRank) {
  // Rank 0 reads a dead address for rank 1 in attempt 0 (the lower rank connects, and is
  // refused at port 1); attempt 1 is clean. Every rank retries once and the job works.
  MemoryStore memory;
  class DeadAddress final : public Store {
   public:
    explicit DeadAddress(Store* base) : base_(base) {}
    absl::Status Set(const std::string& k, const std::string& v) override {
      return base_->Set(k, v);
    }
    absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
      absl::StatusOr<std::string> value = base_->Get(key, timeout);
      if (value.ok() && key == "dead/0/1" && value->size() == StrayConnectionStore::kAddressBytes) {
        sockaddr_in* addr = reinterpret_cast<sockaddr_in*>(value->data());
        addr->sin_port = htons(1);
      }
      return value;
    }

   private:
    Store* base_;
  } store(&memory);
  Retries retries;
  ExpectJobWorks(2, &store, Loopback("dead", &retries));
  ASSERT_EQ(retries.count(), 2);  // once on each rank
  absl::MutexLock lock(&retries.mu);
  for (const std::string& reason : retries.reasons) {
    EXPECT_THAT(reason, HasSubstr("0: ")) << reason;
  }
}

TEST(GlooBootstrapRetry, AWildcardHostnameIsRefused) {
  MemoryStore store;
  Retries retries;
  for (const std::string host : {"0.0.0.0", "::"}) {
    GlooOptions options = Loopback("wild", &retries);
    options.hostname = host;
    EXPECT_THAT(
        GlooCollective::Create(0, 1, &store, options),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr(absl::StrCat("GlooOptions.hostname \"", host, "\" is a wildcard"))));
  }
}

TEST(GlooAuthenticatedPairing, TheConnectorChecksTheListenersAnswer) {
  // Rank 0 of 2 dials rank 1's published address, where something else listens: it reads
  // rank 0's token and answers with one of the right form but the wrong nonce. Rank 0
  // takes no link and says so.
  ASSERT_OK_AND_ASSIGN(gloo_internal::Listener impostor, gloo_internal::Listen("127.0.0.1", ""));
  gloo_internal::Pairing pairing;
  pairing.rank = 0;
  pairing.size = 2;
  pairing.nonces = {std::string(gloo_internal::kNonceBytes, 'a'),
                    std::string(gloo_internal::kNonceBytes, 'b')};
  pairing.addresses = {sockaddr_storage{}, impostor.address};
  ASSERT_OK_AND_ASSIGN(gloo_internal::Listener own, gloo_internal::Listen("127.0.0.1", ""));
  pairing.addresses[0] = own.address;
  std::thread answer([&] {
    pollfd p = {impostor.fd, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 10000), 1);
    const int fd = accept(impostor.fd, nullptr, nullptr);
    ASSERT_GE(fd, 0);
    const std::string token = gloo_internal::PairingToken(0, 1, pairing.nonces[1]);
    std::string got(token.size(), '\0');
    ASSERT_EQ(recv(fd, got.data(), got.size(), MSG_WAITALL), static_cast<ssize_t>(got.size()));
    EXPECT_EQ(got, token);
    const std::string wrong =
        gloo_internal::PairingAnswer(1, 0, std::string(gloo_internal::kNonceBytes, 'x'));
    ASSERT_EQ(send(fd, wrong.data(), wrong.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(wrong.size()));
    // Held open until rank 0 has judged the answer (it closes its end: EOF here).
    char c;
    EXPECT_EQ(recv(fd, &c, 1, 0), 0);
    ::close(fd);
  });
  const int never = eventfd(0, EFD_CLOEXEC);
  EXPECT_THAT(
      gloo_internal::PairMesh(std::move(own), pairing, absl::Now() + absl::Seconds(10), never),
      StatusIs(absl::StatusCode::kUnavailable,
               HasSubstr("answered the pairing with a wrong token")));
  answer.join();
  ::close(never);
}

TEST(GlooAuthenticatedPairing, TokensNameBothRanksAndTheNonce) {
  const std::string nonce(gloo_internal::kNonceBytes, 'n');
  const std::string token = gloo_internal::PairingToken(1, 2, nonce);
  EXPECT_EQ(token.size(), 16u + 8u + nonce.size());
  EXPECT_NE(token, gloo_internal::PairingToken(2, 1, nonce));
  EXPECT_NE(token, gloo_internal::PairingToken(1, 2, std::string(nonce.size(), 'm')));
  // The answer is no token: a connector's own bytes reflected back do not pass for it.
  EXPECT_NE(token, gloo_internal::PairingAnswer(1, 2, nonce));
  EXPECT_EQ(gloo_internal::PairingAnswer(1, 2, nonce).size(), token.size());
  ASSERT_OK_AND_ASSIGN(const std::string a, gloo_internal::RandomNonce());
  ASSERT_OK_AND_ASSIGN(const std::string b, gloo_internal::RandomNonce());
  EXPECT_NE(a, b);
  EXPECT_EQ(a.size(), nonce.size());
}

}  // namespace
}  // namespace lockstep
