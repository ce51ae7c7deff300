// DataPipeline: a worker's read-ahead for one split of a streamed dataset.
// Contract: data_pipeline.h.
#include "workers/data_pipeline.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

// Examples a thread claims at once: few enough that a batch spreads over the threads,
// enough that the lock is not taken per example.
constexpr size_t kChunk = 4;

}  // namespace

struct DataPipeline::Batch {
  int64_t tag = 0;
  rng::Key key;
  std::vector<int32_t> indices;
  std::unique_ptr<float[]> images;  // set while active
  std::unique_ptr<int32_t[]> labels;
  bool active = false;   // holds buffers (counted in active_)
  bool dropped = false;  // no longer wanted: its buffers go once no thread writes them
  bool taking = false;   // a Take waits for it: nothing replaces it
  size_t next = 0;       // the first unclaimed example
  size_t done = 0;       // examples finished (or skipped after an error)
  size_t in_flight = 0;  // claimed, not yet finished
  absl::Status status;   // the error of the earliest failed example
  size_t error_at = 0;

  size_t size() const { return indices.size(); }
  bool complete() const { return done == size(); }
  bool matches(rng::Key k, std::span<const int32_t> idx) const {
    return key == k && std::equal(indices.begin(), indices.end(), idx.begin(), idx.end());
  }
};

// Scratch for the callers of Take that help to decode (decode threads own theirs).
class DataPipeline::ScratchPool {
 public:
  struct Item {
    std::unique_ptr<ImageTransform::Scratch> scratch;
    StoredExample stored;
  };
  explicit ScratchPool(const ImageTransform* transform) : transform_(transform) {}
  std::unique_ptr<Item> Get() {
    {
      absl::MutexLock lock(&mu_);
      if (!free_.empty()) {
        std::unique_ptr<Item> item = std::move(free_.back());
        free_.pop_back();
        return item;
      }
    }
    auto item = std::make_unique<Item>();
    item->scratch = transform_->NewScratch();
    return item;
  }
  void Put(std::unique_ptr<Item> item) {
    absl::MutexLock lock(&mu_);
    free_.push_back(std::move(item));
  }

 private:
  const ImageTransform* transform_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Item>> free_ ABSL_GUARDED_BY(mu_);
};

DataPipeline::DataPipeline(std::shared_ptr<const ExampleSource> source,
                           std::shared_ptr<const ImageTransform> transform, Options options)
    : source_(std::move(source)),
      transform_(std::move(transform)),
      options_(options),
      scratch_(std::make_unique<ScratchPool>(transform_.get())) {
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { ThreadLoop(); });
}

DataPipeline::~DataPipeline() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    if (aborted_.ok()) aborted_ = absl::CancelledError("the data pipeline stopped");
    work_cv_.SignalAll();
    done_cv_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
}

void DataPipeline::Prefetch(int64_t tag, rng::Key key, std::span<const int32_t> indices) {
  absl::MutexLock lock(&mu_);
  if (stop_ || !aborted_.ok()) return;
  for (auto it = batches_.begin(); it != batches_.end(); ++it) {
    if ((*it)->tag != tag) continue;
    if ((*it)->taking || (*it)->matches(key, indices)) return;
    Drop(**it);
    batches_.erase(it);
    break;
  }
  if (batches_.size() >= static_cast<size_t>(options_.max_batches + options_.max_requests)) {
    return;  // made on demand when its step comes
  }
  auto b = std::make_shared<Batch>();
  b->tag = tag;
  b->key = key;
  b->indices.assign(indices.begin(), indices.end());
  batches_.push_back(std::move(b));
  Activate();
}

void DataPipeline::Activate() {
  for (const std::shared_ptr<Batch>& b : batches_) {
    if (active_ >= options_.max_batches) return;
    if (b->active || b->dropped) continue;
    b->images = std::make_unique_for_overwrite<float[]>(b->size() * row());
    b->labels = std::make_unique_for_overwrite<int32_t[]>(b->size());
    b->active = true;
    ++active_;
    work_cv_.SignalAll();
  }
}

void DataPipeline::Drop(Batch& b) {
  b.dropped = true;
  if (!b.active || b.in_flight > 0) return;  // the last chunk in flight frees it
  b.images.reset();
  b.labels.reset();
  b.active = false;
  --active_;
  Activate();
}

size_t DataPipeline::Claim(Batch& b, size_t max, size_t* first) {
  if (!b.active || b.dropped || !b.status.ok() || b.next >= b.size()) return 0;
  *first = b.next;
  const size_t count = std::min(max, b.size() - b.next);
  b.next += count;
  b.in_flight += count;
  return count;
}

DataPipeline::Batch* DataPipeline::NextWork() {
  for (const std::shared_ptr<Batch>& b : batches_) {
    if (b->active && !b->dropped && b->status.ok() && b->next < b->size()) return b.get();
  }
  return nullptr;
}

absl::Status DataPipeline::DecodeOne(int32_t index, rng::Key key, StoredExample& stored,
                                     ImageTransform::Scratch* scratch, float* out,
                                     int32_t* label) const {
  if (index < 0 || index >= source_->size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample index ", index, " is outside the dataset (", source_->size(), " examples)"));
  }
  const rng::Key example_key =
      transform_->random() ? rng::FoldIn(key, static_cast<uint32_t>(index)) : key;
  int64_t l = 0;
  RETURN_IF_ERROR(
      ReadAndTransform(*source_, *transform_, index, example_key, scratch, &stored, out, &l));
  // CheckSplitFitsModel checked the split's largest label at the job's start; a label
  // read now is the index's, unless the file changed since.
  if (l < 0 || (options_.num_classes > 0 && l >= options_.num_classes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_->Where(index), ": label ", l, " is not in [0, ", options_.num_classes,
                     "): the model's last layer has ", options_.num_classes, " outputs"));
  }
  *label = static_cast<int32_t>(l);
  return absl::OkStatus();
}

void DataPipeline::Decode(Batch& b, size_t first, size_t count) {
  std::unique_ptr<ScratchPool::Item> item = scratch_->Get();
  absl::Status error;
  size_t error_at = 0, finished = 0;
  for (size_t i = first; i < first + count; ++i) {
    error = DecodeOne(b.indices[i], b.key, item->stored, item->scratch.get(),
                      b.images.get() + i * row(), b.labels.get() + i);
    ++finished;
    if (!error.ok()) {
      error_at = i;
      break;
    }
  }
  scratch_->Put(std::move(item));
  absl::MutexLock lock(&mu_);
  decoded_ += static_cast<int64_t>(error.ok() ? finished : finished - 1);
  b.in_flight -= count;
  b.done += count;
  if (!error.ok() && (b.status.ok() || error_at < b.error_at)) {
    b.status = std::move(error);
    b.error_at = error_at;
  }
  if (!b.status.ok() && b.next < b.size()) {  // the batch has failed: skip the rest
    b.done += b.size() - b.next;
    b.next = b.size();
  }
  if (b.dropped) Drop(b);
  if (b.complete()) done_cv_.SignalAll();
}

void DataPipeline::ThreadLoop() {
  mu_.Lock();
  while (true) {
    Batch* b = nullptr;
    while (!stop_ && (b = NextWork()) == nullptr) work_cv_.Wait(&mu_);
    if (stop_) break;
    std::shared_ptr<Batch> keep;
    for (const std::shared_ptr<Batch>& x : batches_) {
      if (x.get() == b) keep = x;
    }
    size_t first = 0;
    const size_t count = Claim(*keep, kChunk, &first);
    mu_.Unlock();
    Decode(*keep, first, count);
    mu_.Lock();
  }
  mu_.Unlock();
}

absl::Status DataPipeline::Take(int64_t tag, rng::Key key, std::span<const int32_t> indices,
                                float* images, int32_t* labels) {
  std::shared_ptr<Batch> b;
  {
    absl::MutexLock lock(&mu_);
    if (!aborted_.ok()) return aborted_;
    for (auto it = batches_.begin(); it != batches_.end();) {
      Batch& x = **it;
      if (x.tag == tag && x.matches(key, indices)) {
        b = *it++;
        continue;
      }
      if (x.tag > tag) {
        ++it;
        continue;
      }
      Drop(x);  // an earlier step's, or this step's under another key or indices
      it = batches_.erase(it);
    }
    if (b == nullptr) {
      b = std::make_shared<Batch>();
      b->tag = tag;
      b->key = key;
      b->indices.assign(indices.begin(), indices.end());
      batches_.push_front(b);
    }
    b->taking = true;
    if (!b->active) {  // needed now: over max_batches by one if need be
      b->images = std::make_unique_for_overwrite<float[]>(b->size() * row());
      b->labels = std::make_unique_for_overwrite<int32_t[]>(b->size());
      b->active = true;
      ++active_;
    }
    work_cv_.SignalAll();
    const absl::Time deadline = absl::Now() + options_.stall_timeout;
    while (!b->complete() && aborted_.ok()) {
      size_t first = 0;
      if (const size_t count = Claim(*b, kChunk, &first); count > 0) {
        mu_.Unlock();
        Decode(*b, first, count);
        mu_.Lock();
        continue;
      }
      if (done_cv_.WaitWithDeadline(&mu_, deadline) && !b->complete() && aborted_.ok()) {
        return absl::DeadlineExceededError(
            absl::StrCat("the data pipeline made ", b->done, " of batch ", tag, "'s ", b->size(),
                         " examples in ", absl::FormatDuration(options_.stall_timeout),
                         ": reading the dataset stalled"));
      }
    }
    if (!aborted_.ok()) return aborted_;
    batches_.erase(std::find(batches_.begin(), batches_.end(), b));
  }
  // Complete and out of the list: no thread touches it any more.
  absl::Status status = b->status;
  if (status.ok()) {
    std::memcpy(images, b->images.get(), b->size() * row() * sizeof(float));
    std::memcpy(labels, b->labels.get(), b->size() * sizeof(int32_t));
  }
  absl::MutexLock lock(&mu_);
  Drop(*b);
  return status;
}

void DataPipeline::Abort(absl::Status why) {
  absl::MutexLock lock(&mu_);
  if (aborted_.ok())
    aborted_ = why.ok() ? absl::CancelledError("the data pipeline was aborted") : why;
  done_cv_.SignalAll();
}

int64_t DataPipeline::decoded() const {
  absl::MutexLock lock(&mu_);
  return decoded_;
}

}  // namespace lockstep
