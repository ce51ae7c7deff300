// job_records_bench: what a durable job record costs (JobRecords::Save: JSON, write, fsync,
// rename, fsync of the folder), the write behind every job state change and every Submit.
// The job API never waits for it under its lock (job_manager.h).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "services/coordinator/storage/job_records.h"

namespace lockstep {
namespace {

void BM_SaveRecord(benchmark::State& state) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / absl::StrCat("records-bench-", getpid())).string();
  JobRecords records(dir);
  v1::Job job;
  job.set_id("job-000001");
  job.mutable_spec()->mutable_model()->set_kind("cnn");
  job.set_state(v1::RUNNING);
  int64_t version = 0;
  for (auto _ : state) {
    if (!records.Save(job, ++version).ok()) state.SkipWithError("Save failed");
  }
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_SaveRecord)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace lockstep

BENCHMARK_MAIN();
