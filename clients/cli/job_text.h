// The human form of a job, as `status`, `list` and `watch` print it: a headline (id, state,
// name, progress, loss, accuracy, workers, owner) and indented lines for what waits, recovers,
// failed or was written; the tables of `list` and `workers`; and how a user names a job: its
// id or a unique prefix of it. Pure functions of their arguments. Every string that came
// from a user or a server is Printable (terminal_text.h).
#ifndef LOCKSTEP_CLIENTS_CLI_JOB_TEXT_H_
#define LOCKSTEP_CLIENTS_CLI_JOB_TEXT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lockstep/v1/job.pb.h"

namespace lockstep::cli {

// "1 worker", "2 workers".
std::string Count(int64_t n, const std::string& noun);

// A params checksum as the dashboard shows it: 16 hex digits.
std::string Hex64(uint64_t value);

// How many workers the job runs on now, else how many it asks for: "2 workers", or "1-4
// workers" for an elastic job that runs on none now.
std::string WorkersText(const v1::Job& job);

// The job in lines, each ending in "\n", every string from the job Printable. Progress
// ("step S/T") only once the job has a step count (a queued job, or one that failed before
// it ran, has none); once it ended, when it started and ended and how long it took, and
// its params checksum (Hex64).
std::string JobText(const v1::Job& job);

// An event or a log line in one line: "2026-12-02T05:00:00.000Z  step 3/10  loss ...".
std::string EventText(const v1::JobEvent& event);

// `list`: a table with a header, one job a line, columns aligned: ID, STATE, NAME, STEP,
// LOSS, TEST-ACC, WORKERS (WorkersText), AGE (since created, at `now`). `wide` (`list -o
// wide`): ID, STATE, NAME, STEP, LOSS, TEST-ACC, SAMPLES/S, WORKERS (their ids, else the
// count asked for), OWNER, AGE, and REASON (what it waits for, or why it failed).
std::string JobTable(const std::vector<v1::Job>& jobs, int64_t now_unix_ms, bool wide);

// `workers`: a table with a header, one worker a line: ID, NAME, ADDRESS, DEVICE, THREADS,
// STATUS (free, running JOB, leaving, quarantined: why).
std::string WorkersTable(const std::vector<v1::WorkerInfo>& workers);

// Whether the registered `workers` could ever run `spec` (enough of them suit it, as the
// scheduler matches them: device, and for a CPU job at least its threads; quarantined ones
// do not count; an elastic job needs its min). INVALID_ARGUMENT naming `workers` and what there is
// when not: such a job would wait in the queue until more register.
absl::Status CheckCanFit(const v1::JobSpec& spec, const std::vector<v1::WorkerInfo>& workers);

// The one id among `ids` that is `name` or starts with it (e.g. "job-000007" for
// "job-000007-3fa1"). NOT_FOUND naming `name` when none does; INVALID_ARGUMENT naming the
// ids when several do.
absl::StatusOr<std::string> MatchJobId(const std::vector<std::string>& ids,
                                       const std::string& name);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_JOB_TEXT_H_
