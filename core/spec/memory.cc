// A job's memory, estimated from its spec before it runs, so that a job too big for its machines is
// refused at submit. Contract: memory.h.
#include "core/spec/memory.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/data/example_source.h"
#include "core/spec/spec.h"
#include "core/step.h"

namespace lockstep {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
// A state stream to or from one worker: a chunk (1 MiB, or the whole state when smaller)
// and gRPC's copies of it, four in all.
constexpr uint64_t kChunkBytes = kMiB;
constexpr uint64_t kStreamCopies = 4;
// A worker's connection and its share of the job's bookkeeping (measured per worker with
// hundreds of workers: bench/results/scale.md), with room.
constexpr uint64_t kConnectionBytes = 256 << 10;
// A job's other bookkeeping on the coordinator (its event log, at most 4 MiB by
// default, RPCs) and what the heap does not give back between copies.
constexpr uint64_t kCoordinatorJobBytes = 32 * kMiB;
// A CPU worker's process without a job's buffers (code, OpenBLAS, OpenMP and gRPC
// threads: 175 MiB peak RSS when idle), and what its first steps add besides them
// (OpenBLAS's packing buffers, gRPC: 45 to 55 MiB measured).
constexpr uint64_t kWorkerProcessBytes = 256 * kMiB;
// What the CUDA runtime, cuBLAS and NCCL keep in host memory (not measured here: an
// allowance).
constexpr uint64_t kCudaRuntimeBytes = 512 * kMiB;

// A streamed dataset's index per example (a record's shard, offset and length, or a
// file's name) in a worker's memory, with room.
constexpr uint64_t kIndexBytesPerExample = 64;
// A decode thread's working memory (a decoded image before its crops, decoder state): an
// allowance for ImageNet-sized JPEGs.
constexpr uint64_t kDecodeScratchBytes = 16 * kMiB;
constexpr uint64_t kAssumedDecodeThreads = 4;
// The read-ahead's local batches by default (Replica::kDefaultBatchesAhead).
constexpr uint64_t kDefaultBatchesAhead = 4;

std::string Mib(uint64_t bytes) { return absl::StrCat((bytes + kMiB - 1) / kMiB, " MiB"); }

}  // namespace

MemoryEstimate EstimateMemory(const v1::JobSpec& spec, DatasetSize data) {
  absl::StatusOr<TrainSetup> setup = SetupFromSpec(spec);
  if (!setup.ok()) return {};
  const Model& model = setup->model;
  const uint64_t params = uint64_t{model.layout().total()} * sizeof(float);
  const uint64_t slots = setup->optimizer.slots().size();
  const uint64_t n = std::max<uint32_t>(1, spec.workers());
  const uint64_t stats = uint64_t{model.stats_layout().total()} * sizeof(float);
  MemoryEstimate e;
  e.train_state = params * (1 + slots) + stats;
  // The coordinator serializes the start once for every worker (from the seed, a file
  // or a snapshot: reading one holds its tensors and the state, as many copies), and
  // fetches each snapshot and the final checkpoint from rank 0 and copies it into the
  // file's tensors to write it, while the start a file gave may still be held: at most
  // three copies at once, and a stream per worker.
  e.coordinator_per_worker =
      kStreamCopies * std::min(kChunkBytes, e.train_state) + kConnectionBytes;
  e.coordinator = 3 * e.train_state + n * e.coordinator_per_worker + kCoordinatorJobBytes;
  // A worker: params, gradients, optimizer slots and the optimizer's scratch in the
  // backend (on a GPU: none of them in host memory), the batch_stats likewise, and a host
  // copy of the params and batch_stats for checksums.
  const bool cuda = spec.device() == "cuda";
  // Gloo's all-reduce between CPU workers takes scratch memory besides: up to 26 and 53
  // MiB more measured with 2 workers than with 1, for 76 and 153 MiB of params.
  const uint64_t scratch = setup->optimizer.ScratchBytes(model.layout().total());
  e.worker_state = (cuda ? 0 : params * (2 + slots) + scratch + stats) + params + stats +
                   (!cuda && n > 1 ? params / 2 : 0);
  const uint64_t train = std::max<int64_t>(0, data.train), test = std::max<int64_t>(0, data.test);
  const int local_batch = static_cast<int>(spec.global_batch_size() / n);
  const int eval_batch =
      static_cast<int>(std::min<uint64_t>(spec.eval().batch_size(), (test + n - 1) / n));
  e.worker_activations = cuda ? 0 : WorkspaceBytes(model, local_batch, /*train=*/true);
  // A BatchNorm model's audit on logical replicas: a checker computes the audited replica
  // beside its own (the ride-along, docs/audit.md), one replica's buffers and gradients.
  if (!cuda && stats > 0 && spec.replicas() > 0 && spec.audit().every_steps() > 0) {
    e.worker_activations +=
        WorkspaceBytes(model, static_cast<int>(spec.global_batch_size() / spec.replicas()),
                       /*train=*/true) +
        params;
  }
  e.worker_eval = cuda ? 0 : WorkspaceBytes(model, eval_batch, /*train=*/false);
  // One int32 label per example, or one target per position for a sequence model.
  const uint64_t example =
      model.input().size() * sizeof(float) + uint64_t(model.positions()) * sizeof(int32_t);
  if (IsStreamedFormat(spec.dataset().format())) {
    // Streamed (workers/data_pipeline.h): the batches read ahead, one more taken on demand
    // and the staged step and audit batches; the evaluation's two and its staged one; the
    // splits' indexes; the decode threads' scratch. Not the dataset.
    const uint64_t threads = spec.dataset().stream().threads() > 0
                                 ? spec.dataset().stream().threads()
                                 : kAssumedDecodeThreads;
    const uint64_t ahead = spec.dataset().stream().batches_ahead() > 0
                               ? spec.dataset().stream().batches_ahead()
                               : kDefaultBatchesAhead;
    e.worker_dataset = (ahead + 3) * uint64_t(local_batch) * example +
                       3 * uint64_t(eval_batch) * example + (train + test) * kIndexBytesPerExample +
                       threads * kDecodeScratchBytes;
  } else {
    e.worker_dataset = (train + test) * example;
  }
  e.worker_process = kWorkerProcessBytes + (cuda ? kCudaRuntimeBytes : 0);
  return e;
}

absl::Status CheckMemoryBudget(const v1::JobSpec& spec, const MemoryBudget& budget,
                               DatasetSize data) {
  const MemoryEstimate e = EstimateMemory(spec, data);
  const std::string model = spec.model().kind() == "mlp"     ? "model.hidden"
                            : spec.model().layers_size() > 0 ? "model.layers"
                                                             : "model";
  if (budget.coordinator_per_job > 0 && e.coordinator > budget.coordinator_per_job) {
    // The state's copies or the workers' streams, whichever weighs more, name the field.
    const uint64_t streams = e.coordinator_per_worker * std::max<uint32_t>(1, spec.workers());
    return absl::ResourceExhaustedError(absl::StrCat(
        streams > 3 * e.train_state ? "workers" : model, ": the job needs about ",
        Mib(e.coordinator), " on the coordinator (up to 3 copies of its ", Mib(e.train_state),
        " TrainState, ", Mib(streams), " for its workers' streams), over the coordinator's ",
        "budget of ", Mib(budget.coordinator_per_job), " per job (--job_memory_budget_mb)"));
  }
  if (budget.worker > 0 && e.worker() > budget.worker) {
    // The part that weighs most names the field to change.
    std::pair<uint64_t, std::string> most = {e.worker_state, model};
    const std::string dataset = IsStreamedFormat(spec.dataset().format())
                                    ? "dataset.stream.batches_ahead"
                                : spec.dataset().format() == "npz" ? "dataset.train_path"
                                                                   : "dataset.path";
    for (const auto& part : {std::pair(e.worker_activations, std::string("global_batch_size")),
                             std::pair(e.worker_eval, std::string("eval.batch_size")),
                             std::pair(e.worker_dataset, dataset)}) {
      if (part.first > most.first) most = part;
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        most.second, ": the job needs about ", Mib(e.worker()), " on each worker (state ",
        Mib(e.worker_state), ", training buffers ", Mib(e.worker_activations),
        ", evaluation buffers ", Mib(e.worker_eval), ", dataset ", Mib(e.worker_dataset),
        ", process ", Mib(e.worker_process), "), over the workers' budget of ", Mib(budget.worker),
        " (--worker_memory_budget_mb)"));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
