// Tests that kill -9 a writer at random moments: a forked child writes in a loop, and the
// parent SIGKILLs it after a random few milliseconds, then checks what the disk holds. For
// the tests of durable writes (durable_file_test.cc, the coordinator's records).
#ifndef LOCKSTEP_CORE_IO_KILL_TESTING_H_
#define LOCKSTEP_CORE_IO_KILL_TESTING_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <thread>

#include "gtest/gtest.h"

namespace lockstep::testing {

struct KillTrials {
  int trials = 40;
  uint32_t seed = 1;
  int min_delay_ms = 2;  // after the child's first complete write
  int max_delay_ms = 50;
};

// Runs `o.trials` trials. In each, a forked child calls `write(trial, n)` for n = 0, 1, ...
// until killed (a false return ends it with a failure); the parent waits for its first
// complete write, kills it with SIGKILL a random delay later, and calls `check(trial)`.
// `*writes` gets the number of writes the children completed in all, so that a test can
// tell that its kills came while writes were going on.
inline void KillDuringWrites(const KillTrials& o, const std::function<bool(int, int64_t)>& write,
                             const std::function<void(int)>& check, int64_t* writes) {
  std::mt19937 rng(o.seed);
  std::uniform_int_distribution<int> delay_ms(o.min_delay_ms, o.max_delay_ms);
  *writes = 0;
  for (int trial = 0; trial < o.trials; ++trial) {
    int fds[2];
    ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // the child: no gtest here, only the writes and a byte per write
      close(fds[0]);
      alarm(60);  // never outlives a parent that failed to kill it
      for (int64_t n = 0;; ++n) {
        if (!write(trial, n)) _exit(1);
        const char done = 1;
        if (::write(fds[1], &done, 1) != 1) _exit(2);
      }
    }
    close(fds[1]);
    pollfd started{fds[0], POLLIN, 0};
    const bool ok = poll(&started, 1, 20000) == 1;
    if (ok) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    char buf[256];
    for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) *writes += n;
    close(fds[0]);
    ASSERT_TRUE(ok) << "trial " << trial << ": the child completed no write in 20 s";
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "trial " << trial << ": the child's writes failed (status " << status << ")";
    check(trial);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_CORE_IO_KILL_TESTING_H_
