// DataPipeline: a worker's read-ahead for one split of a streamed dataset (TFRecord
// shards, an image folder, a record file: core/data/example_source.h). The worker asks
// for a step's batch as soon as the step's command arrives (Prefetch: the coordinator
// streams commands several steps ahead), decode threads read, decode and augment its
// examples into a batch buffer while earlier steps compute, and the step takes the
// finished batch (Take). Memory is bounded by the options, never by the dataset: at most
// `max_batches` batch buffers exist at a time (one more while a step takes a batch that
// was not made ahead), and requests beyond them wait as index lists.
//
// Each example's pixels are ImageTransform::Apply's for the example's key,
// FoldIn(batch key, example index) (docs/datasets.md), so a batch is the same wherever
// and whenever it is made.
//
// Thread safety: thread-safe. Prefetch never waits for decoding; Take waits for its batch
// (helping to decode it) at most `stall_timeout`, or until Abort.
#ifndef LOCKSTEP_WORKERS_DATA_PIPELINE_H_
#define LOCKSTEP_WORKERS_DATA_PIPELINE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/data/example_source.h"
#include "core/data/image_transform.h"
#include "core/rng/threefry.h"

namespace lockstep {

class DataPipeline {
 public:
  struct Options {
    int threads = 2;          // decode threads (0: Take decodes on the caller's thread)
    int max_batches = 4;      // batch buffers made ahead and held
    int max_requests = 64;    // requests waiting beyond them; older ones are dropped
    int64_t num_classes = 0;  // labels must lie in [0, num_classes) (0: not checked)
    absl::Duration stall_timeout = absl::Minutes(10);  // Take's longest wait
  };

  DataPipeline(std::shared_ptr<const ExampleSource> source,
               std::shared_ptr<const ImageTransform> transform, Options options);
  ~DataPipeline();  // stops the threads (a batch being decoded is abandoned)

  int64_t size() const { return source_->size(); }
  // Floats per example: the transform's output shape.
  int64_t row() const { return transform_->output_shape().size(); }

  // Asks for batch `tag` (the examples `indices`, in order, under `key`) to be made ahead.
  // Tags identify requests; a later request with a tag already asked for replaces it if
  // its key or indices differ.
  void Prefetch(int64_t tag, rng::Key key, std::span<const int32_t> indices);

  // Batch `tag` into images[indices.size() * row()] and labels[indices.size()]: the one made
  // ahead if its key and indices are these, else made now. Requests with a smaller tag are
  // dropped (steps come in order). Errors: the first example's that failed, prefixed with
  // where it lives (ExampleSource::Where), INVALID_ARGUMENT for an index outside the split
  // or a label outside [0, num_classes), DEADLINE_EXCEEDED after stall_timeout, Abort's.
  absl::Status Take(int64_t tag, rng::Key key, std::span<const int32_t> indices, float* images,
                    int32_t* labels);

  // Ends every wait in Take with `why` and makes later Takes fail with it.
  void Abort(absl::Status why);

  // Examples decoded so far (made ahead or on demand), for tests and metrics.
  int64_t decoded() const;

 private:
  struct Batch;
  class ScratchPool;

  // Claims up to `max` unclaimed examples of `b` (mu_ held): [*first, *first + count).
  static size_t Claim(Batch& b, size_t max, size_t* first);
  // Decodes examples [first, first + count) of `b` into its buffers (mu_ not held) and
  // records them as done.
  void Decode(Batch& b, size_t first, size_t count);
  // One example: read, check, transform.
  absl::Status DecodeOne(int32_t index, rng::Key key, StoredExample& stored,
                         ImageTransform::Scratch* scratch, float* out, int32_t* label) const;
  // Marks `b` unwanted and frees its buffers unless a thread still writes them (mu_ held).
  void Drop(Batch& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives buffers to waiting requests while fewer than max_batches hold them (mu_ held).
  void Activate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The earliest active batch with unclaimed examples, or null (mu_ held).
  Batch* NextWork() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ThreadLoop();

  const std::shared_ptr<const ExampleSource> source_;
  const std::shared_ptr<const ImageTransform> transform_;
  const Options options_;
  std::unique_ptr<ScratchPool> scratch_;

  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;  // a batch got claimable examples, or stop_
  absl::CondVar done_cv_;  // a batch completed, or aborted_
  std::deque<std::shared_ptr<Batch>> batches_ ABSL_GUARDED_BY(mu_);  // in request order
  int active_ ABSL_GUARDED_BY(mu_) = 0;                              // batches holding buffers
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t decoded_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_DATA_PIPELINE_H_
