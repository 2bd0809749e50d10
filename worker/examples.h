// A split of the job's data as the model takes it: inputs `x` and targets
// `y`, row i of each one sample. Images: x float32 [n, channels, rows, cols]
// (normalized), y int64 labels [n]. Tokens: x and y int64 [n, context],
// window i's inputs and its next-token targets (worker/tokens.h). Batches
// are rows of both; nothing else needs to know which it is.
// Not synchronized.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "config/job.h"
#include "worker/dataset.h"
#include "worker/model.h"
#include "worker/tokens.h"

namespace geodesic::worker {

struct Examples {
  torch::Tensor x, y;

  int64_t size() const { return x.defined() ? x.size(0) : 0; }
  // Rows `sel` (int64 [k]) of both.
  Examples Rows(const torch::Tensor& sel) const { return {x.index_select(0, sel), y.index_select(0, sel)}; }
  Examples Rows(const std::vector<int64_t>& rows) const;
  // The first n rows (all if fewer).
  Examples Head(int64_t n) const;
  bool tokens() const { return x.defined() && x.scalar_type() == torch::kInt64; }
};

// The samples `indices` of `set` (all if null).
Examples ImageExamples(const ImageSet& set, const std::vector<int64_t>* indices = nullptr);
// The windows `windows` of `set` (all if null).
Examples TokenExamples(const TokenSet& set, const std::vector<int64_t>* windows = nullptr);

// The shape a model must take for token data: windows of data.context
// tokens, ids below data.vocab or else the largest id in `set` + 1.
SampleShape ShapeOf(const TokenSet& set, const DataSpec& data);

// Split "train" or "test" of the job's data as examples, with its shape:
// any dataset kind. max_samples > 0: only the first max_samples.
struct SplitExamples {
  Examples examples;
  SampleShape shape;
};
StatusOr<SplitExamples> LoadExamples(const DataSpec& data, const std::string& split, int64_t max_samples = 0);

// The training split dealt to federated.clients clients (data.partition:
// images by label, token windows by window, document or group), each given
// at least one batch: every client's rows of `examples`. With `only` >= 0
// (a real client), `examples` holds that client's rows alone, numbered
// 0..k-1 in clients[only], and the other clients' lists are empty. The
// digest is of the whole partition either way.
struct ClientSplit {
  Examples examples;
  SampleShape shape;
  std::vector<std::vector<int64_t>> clients;
  std::string digest;
};
StatusOr<ClientSplit> LoadClientSplit(const JobSpec& job, int64_t only = -1);
// The same for a split already loaded.
StatusOr<ClientSplit> ClientSplitOf(const JobSpec& job, const ImageSet& train, int64_t only = -1);
StatusOr<ClientSplit> ClientSplitOf(const JobSpec& job, const TokenSet& train, int64_t only = -1);

}  // namespace geodesic::worker
