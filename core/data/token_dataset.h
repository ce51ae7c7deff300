// Token datasets for sequence models (docs/datasets.md): a split is a set of windows of
// `context + 1` tokens, each an example whose inputs are its first `context` tokens and
// whose targets are the same window shifted by one (next-token prediction). The job's
// RNG plan orders the windows as it orders images (core/plan.h), and ShardBatch splits
// each batch of windows across replicas alike.
//
// Two sources: a plain text file read as bytes (vocabulary 256: token = the byte), and a
// .npz array of integer tokens, either one stream [n] or sequences [N, context + 1]. A
// stream of n tokens gives floor((n - 1) / context) windows, window i covering tokens
// [i * context, i * context + context] (consecutive windows share one token: the last
// target of one is the first input of the next), the last partial window dropped.
//
// In a Dataset the inputs are float32 token ids (exact: tokens are < 2^24), row `context`,
// shape [context] (flat), and the targets int32, label_row = context per example.
//
// Thread safety: plain functions.
#ifndef LOCKSTEP_CORE_DATA_TOKEN_DATASET_H_
#define LOCKSTEP_CORE_DATA_TOKEN_DATASET_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "core/data/data_roots.h"
#include "core/data/dataset.h"

namespace lockstep {

// Tokens must lie in [0, kMaxTokens): float32 holds every such id exactly.
inline constexpr int64_t kMaxTokens = int64_t{1} << 24;
inline constexpr int kByteVocabulary = 256;

// The windows of `stream` as a Dataset (see above): context >= 1, every token in
// [0, kMaxTokens). `field` and `from` name the source in errors ("dataset.train_path",
// "/data/a.txt"). INVALID_ARGUMENT naming both when the stream is shorter than one
// window or a token is out of range (with its offset).
absl::StatusOr<Dataset> WindowTokens(std::span<const int32_t> stream, int context,
                                     const std::string& field, const std::string& from);

// A text file's bytes as tokens, windowed. Errors name the field and the file:
// INVALID_ARGUMENT for a path outside `roots`; FAILED_PRECONDITION for a missing or
// unreadable file; INVALID_ARGUMENT for a file over max_bytes, or too short for one window.
absl::StatusOr<Dataset> LoadTextDataset(const std::string& path, const std::string& field,
                                        int context, uint64_t max_bytes = uint64_t{1} << 31,
                                        const DataRoots& roots = {});

// The .npz array `key` of integer tokens: [n] (a stream, windowed) or [N, context + 1]
// (one window per row). Errors name the field, the file and the array: as LoadNpzDataset
// for the file; INVALID_ARGUMENT for a missing array (listing those present), another
// rank, a row of another length, a non-integer dtype, or a token outside [0, 2^24) (with
// its position).
absl::StatusOr<Dataset> LoadTokenNpzDataset(const std::string& path, const std::string& field,
                                            const std::string& key, int context,
                                            uint64_t max_bytes = uint64_t{1} << 31,
                                            const DataRoots& roots = {});

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_TOKEN_DATASET_H_
