// Local SGD rounds (training.local_steps > 1), a worker's side.
//
// Each clock is a round: the worker takes local_steps minibatch steps on
// its own model with the job's optimizer, the inner one (SGD, Adam or
// AdamW, as LibTorch's own torch::optim, state kept across rounds), then
// pushes its progress over the round, u = model - base, as the "gradient"
// -u; the shards average a round's pushes (BSP) and apply the outer step
// global -= outer_lr * mean(-u), with outer (Nesterov) momentum
// (JobSpec::ShardOptimizer). AdamW inside and Nesterov outside is DiLoCo.
//
// Pulls land in global(), this worker's copy of the shards' model (pulls
// of changes are added into it, so nothing else may write it). Without
// overlap, a round starts from the pulled global model (Restart). With
// overlap_rounds, the next round starts at once from the local model while
// the round's average travels; when that round ends, Finish(merged = true)
// folds the average in under the progress made since: model = global + u.
// A worker's steps then read the others' progress one round late, and the
// round trip hides behind local_steps steps of compute (docs/wan.md). With
// overlap_steps N the average is folded in mid-round as soon as it is
// there, and waited for after N steps (MergeNow), so it is at most N
// steps late.
//
// With training.fragments the same steps act on a span of the flat
// parameter vector, one fragment's chunks: a fragment's base is where its
// own outer round started, P clocks back (streaming DiLoCo).
//
// Not synchronized; the training thread owns it.
#pragma once

#include <torch/torch.h>

#include "config/job.h"

namespace geodesic::worker {

class LocalRounds {
 public:
  // `params` is the model's flat parameter vector (kept by reference).
  // `rounds`: the worker trains in rounds and pulls into global() (local
  // SGD, or federated rounds, which use only global()); otherwise this
  // holds nothing. Local momentum only with training.local_steps > 1.
  LocalRounds(const JobSpec& job, torch::Tensor& params, bool rounds = true);

  // What the shards hold (JobSpec::ShardValues): the global model, and
  // under SCAFFOLD the server's control variate after it.
  torch::Tensor& global() { return global_; }
  // The model and the round's base become the global model.
  void Restart();
  // The global model is the model's own values (the shards were set from
  // them, PsClient::HoldsAllInitial); values past the model stay zero.
  void AdoptOwn();
  // One step of the inner optimizer with gradient `grad` and learning rate
  // optimizer.lr * lr_factor.
  void Step(const torch::Tensor& grad, double lr_factor);
  // Ends a round: returns what to push, base - model (a new tensor). With
  // `merged`, global() holds the previous round's average, which the model
  // then takes under this round's progress; the base becomes the model.
  torch::Tensor Finish(bool merged);
  // Mid-round (training.overlap_steps): global() holds the previous
  // round's average; the model takes it under the progress made so far this
  // round, and the base becomes the global model, so the round's push still
  // carries all of its steps.
  void MergeNow();

  // Values [begin, begin + size) of the flat parameter vector.
  struct Span {
    int64_t begin = 0, size = 0;
  };
  // The same on one fragment's span: Restart(span) makes it the global
  // model's; Finish(span, push) writes the push on the span (base - model)
  // and moves the span's base to the model, leaving the rest of `push` as
  // it is (only the span's chunks are sent: O(span) a clock, not O(model));
  // MergeNow(span) folds the span's average in under the progress made
  // since its push.
  void Restart(Span span);
  void Finish(Span span, torch::Tensor& push);
  void MergeNow(Span span);

 private:
  torch::Tensor& params_;
  torch::Tensor global_, base_;
  // The inner optimizer steps `alias_`, a tensor sharing params_'s storage.
  torch::Tensor alias_;
  std::unique_ptr<torch::optim::Optimizer> inner_;
  double lr_ = 0;
};

}  // namespace geodesic::worker
