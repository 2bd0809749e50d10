// Token data (data.dataset: tokens), the convention small language-model
// code uses (nanoGPT): a split is one flat file of little-endian token ids,
// uint16 or uint32 (data.token_bytes), `train.bin` and `val.bin` in
// data.path. Optional side files give the documents the tokens came from:
// `SPLIT.docs`, little-endian uint64 start offsets (in tokens) of each
// document, the first 0, increasing; `SPLIT.groups`, one little-endian
// uint32 per document, its group (an author, a source file).
// scripts/convert_dataset.py text writes all of them (docs/language-models.md).
//
// Samples are windows: window i is tokens [i * context, i * context +
// context] (context + 1 tokens), its inputs the first `context` and its
// targets the last `context`, so that every token but the first is
// predicted once per epoch; a split of N tokens has (N - 1) / context
// windows, and an epoch visits each once. Torch-free; pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/job.h"

namespace geodesic::worker {

struct TokenSet {
  std::vector<uint32_t> tokens;
  int context = 0;
  uint32_t max_token = 0;            // the largest id in `tokens`
  std::vector<uint64_t> doc_starts;  // empty without a .docs file
  std::vector<uint32_t> doc_groups;  // empty without a .groups file
  std::string file;                  // the .bin file, for errors

  int64_t windows() const { return tokens.size() > 1 ? static_cast<int64_t>(tokens.size() - 1) / context : 0; }
  // The document window i starts in (0 without documents).
  int64_t DocumentOf(int64_t window) const;
};

// The split's file in data.path: "train" is train.bin, "test" and "val"
// val.bin.
std::string TokenFile(const DataSpec& data, const std::string& split);

// Loads split "train" or "test" (val.bin) of data.path. Errors name the
// file: a size that is not a whole number of token_bytes ids, fewer than
// context + 1 tokens, an id at or above data.vocab (when set), a .docs file
// that is not increasing from 0 within the tokens, a .groups file whose
// length is not the number of documents. max_windows > 0 keeps only the
// tokens of the first max_windows windows.
StatusOr<TokenSet> LoadTokens(const DataSpec& data, const std::string& split, int64_t max_windows = 0);

// A training split that epochs cannot be counted over: its windows differ
// from job.TrainSamples() when the job counts training.epochs. Names the key
// and the number to set.
Status CheckTokenEpochs(const JobSpec& job, const TokenSet& train);

// The windows of part `part` of `parts` (data.partition): "iid", a seeded
// permutation of the windows cut into near-equal slices (IidPartition);
// "documents", the documents dealt out in a seeded order, each to the part
// with the fewest tokens so far, and every window to the part of the
// document it starts in; "groups", the same with whole groups. The windows
// of a part are in increasing order except for iid. InvalidArgument naming
// data.partition when the side file it needs is missing or a part gets no
// window.
// A part with fewer than `min_windows` windows is an error.
StatusOr<std::vector<std::vector<int64_t>>> PartitionWindows(const TokenSet& set, int parts, const PartitionSpec& spec,
                                                             uint64_t seed, int64_t min_windows = 1);

}  // namespace geodesic::worker
