// ShmAllReduce: GlooCollective's sums and max for ranks that share a host, through shared memory
// instead of TCP loopback. Contract: shm_allreduce.h.
#include "workers/gloo/shm_allreduce.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "workers/gloo/ring_allreduce.h"

namespace lockstep::gloo_internal {
namespace {

using Clock = std::chrono::steady_clock;

// The counters, each on a cache line of its own.
enum Counter { kWritten = 0, kReduced = 1, kRead = 2 };
struct alignas(64) Word {
  std::atomic<uint32_t> v;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);
struct Header {
  uint64_t token;
  Word counters[3];
  Word aborted;
  Word contributions;  // RunBy: this rank's contributions to the piece in its segment
};
// The values start on the second page.
constexpr size_t kDataOffset = 4096;
static_assert(sizeof(Header) <= kDataOffset);
constexpr char kNamePrefix[] = "/lockstep-";
constexpr auto kSlice = std::chrono::milliseconds(50);
constexpr int kSpins = 4000;

bool Reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, Clock::duration timeout) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  struct timespec ts = {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  // Shared (not FUTEX_PRIVATE): the word lives in another process's mapping too.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

absl::StatusOr<std::string> RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (getrandom(raw.data(), bytes, 0) != static_cast<ssize_t>(bytes)) {
    return absl::InternalError(absl::StrCat("getrandom: ", strerror(errno)));
  }
  std::string hex;
  for (unsigned char c : raw) absl::StrAppend(&hex, absl::Hex(c, absl::kZeroPad2));
  return hex;
}

}  // namespace

// A mapped segment; the creator holds an exclusive flock on it for as long as it lives and
// unlinks its name at the latest when it closes.
struct ShmAllReduce::Segment {
  int fd = -1;
  void* base = nullptr;
  size_t bytes = 0;
  std::string unlink_name;  // the creator's, until unlinked

  ~Segment() {
    Unlink();
    if (base != nullptr) munmap(base, bytes);
    if (fd >= 0) close(fd);
  }
  void Unlink() {
    if (!unlink_name.empty()) shm_unlink(unlink_name.c_str());
    unlink_name.clear();
  }
  Header* header() const { return static_cast<Header*>(base); }
  template <typename T>
  T* data() const {
    return reinterpret_cast<T*>(static_cast<char*>(base) + kDataOffset);
  }
  std::atomic<uint32_t>* counter(int which) const { return &header()->counters[which].v; }

  static absl::StatusOr<std::unique_ptr<Segment>> Map(int fd, size_t bytes,
                                                      const std::string& what) {
    auto s = std::make_unique<Segment>();
    s->fd = fd;
    s->bytes = bytes;
    s->base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s->base == MAP_FAILED) {
      s->base = nullptr;
      return absl::UnavailableError(absl::StrCat("mmap ", what, ": ", strerror(errno)));
    }
    return s;
  }

  static absl::StatusOr<std::unique_ptr<Segment>> Create(const std::string& name, size_t bytes,
                                                         uint64_t token) {
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
      return absl::UnavailableError(absl::StrCat("shm_open ", name, ": ", strerror(errno)));
    // The pages are reserved now: a /dev/shm too small for them (a container's 64 MiB) is
    // a fall-back to TCP here, not a SIGBUS when a piece is first written.
    int error = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (error == 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) error = errno;
    if (error != 0) {
      const std::string why = strerror(error);
      close(fd);
      shm_unlink(name.c_str());
      return absl::UnavailableError(absl::StrCat("set up ", name, ": ", why));
    }
    absl::StatusOr<std::unique_ptr<Segment>> s = Map(fd, bytes, name);
    if (!s.ok()) {
      shm_unlink(name.c_str());
      return s.status();
    }
    (*s)->unlink_name = name;
    (*s)->header()->token = token;  // the rest is zero (a new shm object reads as zeros)
    return s;
  }

  // A peer's segment from its "name token" entry; UNAVAILABLE when it cannot be opened
  // here or is not the one the peer made.
  static absl::StatusOr<std::unique_ptr<Segment>> Open(const std::string& entry, size_t bytes) {
    std::vector<std::string> parts = absl::StrSplit(entry, ' ');
    uint64_t token = 0;
    if (parts.size() != 2 || !absl::StartsWith(parts[0], kNamePrefix) ||
        parts[0].find('/', 1) != std::string::npos || !absl::SimpleHexAtoi(parts[1], &token)) {
      return absl::UnavailableError(absl::StrCat("not a segment: '", entry, "'"));
    }
    const int fd = shm_open(parts[0].c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
      return absl::UnavailableError(absl::StrCat("shm_open ", parts[0], ": ", strerror(errno)));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
      close(fd);
      return absl::UnavailableError(absl::StrCat(parts[0], ": not ", bytes, " bytes"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Segment> s, Map(fd, bytes, parts[0]));
    if (s->header()->token != token) {
      return absl::UnavailableError(absl::StrCat(parts[0], ": another segment of that name"));
    }
    return s;
  }
};

absl::StatusOr<std::unique_ptr<ShmAllReduce>> ShmAllReduce::Create(int rank, int size, Store* store,
                                                                   const std::string& prefix,
                                                                   absl::Duration timeout,
                                                                   size_t capacity) {
  // Room for at least one value of either type.
  const size_t capacity_bytes = std::max(capacity * sizeof(float), sizeof(int64_t));
  const size_t bytes = kDataOffset + capacity_bytes;
  const auto key = [&](const char* what, int r) { return absl::StrCat(prefix, what, r); };
  std::vector<std::unique_ptr<Segment>> segments(size);
  std::string entry = "none";
  ASSIGN_OR_RETURN(std::string name, RandomHex(16));
  ASSIGN_OR_RETURN(std::string token, RandomHex(8));
  name = kNamePrefix + name;
  uint64_t token_value = 0;
  absl::SimpleHexAtoi(token, &token_value);
  if (auto own = Segment::Create(name, bytes, token_value); own.ok()) {
    segments[rank] = *std::move(own);
    entry = absl::StrCat(name, " ", token);
  }
  RETURN_IF_ERROR(store->Set(key("/shm/", rank), entry));
  bool usable = segments[rank] != nullptr;
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    ASSIGN_OR_RETURN(std::string theirs, store->Get(key("/shm/", q), timeout));
    if (!usable) continue;
    absl::StatusOr<std::unique_ptr<Segment>> s = Segment::Open(theirs, bytes);
    usable = s.ok();
    if (usable) segments[q] = *std::move(s);
  }
  RETURN_IF_ERROR(store->Set(key("/shm-ok/", rank), usable ? "1" : "0"));
  bool all = usable;
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    absl::StatusOr<std::string> answer = store->Get(key("/shm-ok/", q), timeout);
    if (!answer.ok()) return answer.status();
    all = all && *answer == "1";
  }
  // Every rank has opened what it could: the name is no longer needed.
  if (segments[rank] != nullptr) segments[rank]->Unlink();
  if (!all) return nullptr;
  return std::unique_ptr<ShmAllReduce>(new ShmAllReduce(rank, std::move(segments), capacity_bytes));
}

ShmAllReduce::ShmAllReduce(int rank, std::vector<std::unique_ptr<Segment>> segments,
                           size_t capacity_bytes)
    : rank_(rank), capacity_bytes_(capacity_bytes), segments_(std::move(segments)) {}

ShmAllReduce::~ShmAllReduce() = default;

absl::Status ShmAllReduce::AbortedError() {
  absl::MutexLock lock(&mu_);
  return absl::AbortedError(absl::StrCat("shared-memory all-reduce aborted: ", why_.message()));
}

void ShmAllReduce::Abort(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    if (aborted_.load()) return;
    why_ = why.ok() ? absl::AbortedError("aborted") : why;
    aborted_.store(true);
  }
  segments_[rank_]->header()->aborted.v.store(1, std::memory_order_release);
  for (const auto& s : segments_) {
    for (int which : {kWritten, kReduced, kRead}) FutexWakeAll(s->counter(which));
  }
}

void ShmAllReduce::Publish(int which, uint32_t value) {
  std::atomic<uint32_t>* word = segments_[rank_]->counter(which);
  word->store(value, std::memory_order_release);
  FutexWakeAll(word);
}

absl::Status ShmAllReduce::WaitOne(int peer, int which, uint32_t target,
                                   Clock::time_point deadline) {
  const Segment& s = *segments_[peer];
  std::atomic<uint32_t>* word = s.counter(which);
  for (int i = 0; i < kSpins; ++i) {
    if (Reached(word->load(std::memory_order_acquire), target)) return absl::OkStatus();
    __builtin_ia32_pause();
  }
  for (;;) {
    const uint32_t seen = word->load(std::memory_order_acquire);
    if (Reached(seen, target)) return absl::OkStatus();
    if (aborted_.load()) return AbortedError();
    if (s.header()->aborted.v.load(std::memory_order_acquire) != 0) {
      return absl::UnavailableError(
          absl::StrCat("shared-memory all-reduce: rank ", peer, " aborted"));
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("shared-memory all-reduce: rank ", peer, " did not answer in time"));
    }
    // The lock a live peer holds on its segment cannot be shared: if it can, it is gone.
    if (flock(s.fd, LOCK_SH | LOCK_NB) == 0) {
      flock(s.fd, LOCK_UN);
      return absl::UnavailableError(
          absl::StrCat("shared-memory all-reduce: rank ", peer, " is gone"));
    }
    FutexWait(word, seen, std::min<Clock::duration>(deadline - now, kSlice));
  }
}

absl::Status ShmAllReduce::WaitAll(int which, uint32_t target, Clock::time_point deadline) {
  for (int q = 0; q < static_cast<int>(segments_.size()); ++q) {
    if (q != rank_) RETURN_IF_ERROR(WaitOne(q, which, target, deadline));
  }
  return absl::OkStatus();
}

template <typename T, typename Combine>
absl::Status ShmAllReduce::Piece(T* data, size_t n, size_t from, size_t to, Combine combine,
                                 Clock::time_point deadline) {
  const int ranks = static_cast<int>(segments_.size());
  const uint32_t t = ++pieces_;
  T* own = segments_[rank_]->data<T>();
  // The peers have copied the last piece out of this segment: it may be overwritten.
  RETURN_IF_ERROR(WaitAll(kRead, t - 1, deadline));
  std::memcpy(own, data + from, (to - from) * sizeof(T));
  Publish(kWritten, t);
  RETURN_IF_ERROR(WaitAll(kWritten, t, deadline));
  // This rank's chunk, in the ring's order: x[rank], then combine(x[rank + k], acc).
  const auto clip = [&](int chunk, size_t& begin, size_t& end) {
    begin = std::clamp(RingChunkBegin(n, ranks, chunk), from, to);
    end = std::clamp(RingChunkBegin(n, ranks, chunk + 1), from, to);
  };
  size_t begin, end;
  clip(rank_, begin, end);
  for (int k = 1; k < ranks; ++k) {
    const T* __restrict x = segments_[(rank_ + k) % ranks]->data<T>();
    T* __restrict acc = own;
    for (size_t i = begin - from; i < end - from; ++i) acc[i] = combine(x[i], acc[i]);
  }
  Publish(kReduced, t);
  RETURN_IF_ERROR(WaitAll(kReduced, t, deadline));
  for (int c = 0; c < ranks; ++c) {
    clip(c, begin, end);
    std::memcpy(data + begin, segments_[c]->data<T>() + (begin - from), (end - begin) * sizeof(T));
  }
  Publish(kRead, t);
  return absl::OkStatus();
}

template <typename T, typename Combine>
absl::Status ShmAllReduce::RunPieces(T* data, size_t n, Combine combine,
                                     Clock::time_point deadline) {
  if (aborted_.load()) return AbortedError();
  const size_t capacity = capacity_bytes_ / sizeof(T);
  for (size_t from = 0; from < n; from += capacity) {
    RETURN_IF_ERROR(Piece(data, n, from, std::min(n, from + capacity), combine, deadline));
  }
  return absl::OkStatus();
}

absl::Status ShmAllReduce::Run(float* data, size_t n, Clock::time_point deadline) {
  return RunPieces(
      data, n, [](float x, float acc) { return x + acc; }, deadline);
}

absl::Status ShmAllReduce::Run(int64_t* data, size_t n, bool maximum, Clock::time_point deadline) {
  if (maximum) {
    return RunPieces(
        data, n, [](int64_t x, int64_t acc) { return std::max(x, acc); }, deadline);
  }
  return RunPieces(
      data, n, [](int64_t x, int64_t acc) { return x + acc; }, deadline);
}

size_t ShmAllReduce::ChunkBegin(size_t n, int chunk, size_t align) const {
  const size_t begin = RingChunkBegin(n, static_cast<int>(segments_.size()), chunk);
  return std::min(n, (begin + align - 1) / align * align);
}

absl::Status ShmAllReduce::RunBy(std::span<const float* const> local, size_t n, float* out,
                                 const ChunkReduction& r, Clock::time_point deadline) {
  if (aborted_.load()) return AbortedError();
  if (!CanRunBy(r.total, r.align) || local.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory reduction of ", local.size(),
                                                   " of ", r.total, " contributions in ranges of ",
                                                   r.align, ": does not fit the segments"));
  }
  // Each contribution takes `len` floats of the segment: a whole number of alignments.
  const size_t len = capacity_floats() / r.total / r.align * r.align;
  for (size_t from = 0; from < n; from += len) {
    RETURN_IF_ERROR(PieceBy(local, n, out, from, std::min(n, from + len), len, r, deadline));
  }
  return absl::OkStatus();
}

absl::Status ShmAllReduce::PieceBy(std::span<const float* const> local, size_t n, float* out,
                                   size_t from, size_t to, size_t len, const ChunkReduction& r,
                                   Clock::time_point deadline) {
  const int ranks = static_cast<int>(segments_.size());
  const uint32_t t = ++pieces_;
  const Segment& own = *segments_[rank_];
  RETURN_IF_ERROR(WaitAll(kRead, t - 1, deadline));
  for (size_t j = 0; j < local.size(); ++j) {
    std::memcpy(own.data<float>() + j * len, local[j] + from, (to - from) * sizeof(float));
  }
  own.header()->contributions.v.store(static_cast<uint32_t>(local.size()),
                                      std::memory_order_relaxed);
  Publish(kWritten, t);
  RETURN_IF_ERROR(WaitAll(kWritten, t, deadline));
  std::vector<const float*> all;
  for (int q = 0; q < ranks; ++q) {
    const uint32_t count = segments_[q]->header()->contributions.v.load(std::memory_order_relaxed);
    for (uint32_t j = 0; j < count && all.size() <= size_t(r.total); ++j) {
      all.push_back(segments_[q]->data<float>() + j * len);
    }
  }
  if (all.size() != size_t(r.total)) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory reduction: the ranks hold ",
                                                   all.size() > size_t(r.total) ? "more than " : "",
                                                   all.size(), " contributions, not ", r.total));
  }
  // This rank's chunk, into its first contribution's place (the reduction reads each
  // element's contributions before it writes it).
  const auto clip = [&](int chunk, size_t& begin, size_t& end) {
    begin = std::clamp(ChunkBegin(n, chunk, r.align), from, to);
    end = std::clamp(ChunkBegin(n, chunk + 1, r.align), from, to);
  };
  size_t begin, end;
  clip(rank_, begin, end);
  if (end > begin) {
    for (const float*& x : all) x += begin - from;
    r.reduce(all, end - begin, own.data<float>() + (begin - from));
  }
  Publish(kReduced, t);
  RETURN_IF_ERROR(WaitAll(kReduced, t, deadline));
  for (int c = 0; c < ranks; ++c) {
    clip(c, begin, end);
    std::memcpy(out + begin, segments_[c]->data<float>() + (begin - from),
                (end - begin) * sizeof(float));
  }
  Publish(kRead, t);
  return absl::OkStatus();
}

}  // namespace lockstep::gloo_internal
