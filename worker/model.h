// Models a worker trains, with all parameters (and their gradients) living
// in one flat float32 tensor, so that chunks of the flat vector can be
// pulled into and pushed out of the model without gathering tensors.
//
// Models: "cnn" (the reference CNN of docs/architecture.md, ~185k parameters), "mlp"
// (784 -> hidden... -> 10), "synthetic" (a flat vector of N parameters with
// no network, for communication benchmarks). Construction is seeded, so
// every process building the same spec gets the same initial values.
// Not synchronized; one training thread owns a FlatModel.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "common/status.h"
#include "config/job.h"
#include "proto/geodesic.pb.h"
#include "worker/dataset.h"

namespace geodesic::worker {

class FlatModel {
 public:
  static StatusOr<std::unique_ptr<FlatModel>> Create(const ModelSpec& spec, uint64_t seed,
                                                     torch::Device device = torch::kCPU);

  // Logits [batch, 10] for images [batch, 1, 28, 28]. Not for "synthetic".
  torch::Tensor Forward(const torch::Tensor& images);
  bool has_network() const { return static_cast<bool>(net_); }
  void train(bool on) {
    if (net_) net_->train(on);
  }

  // The flat parameter vector; the network's parameters are views into it.
  torch::Tensor& params() { return params_; }
  int64_t num_params() const { return params_.numel(); }

  // Makes a zeroed flat gradient buffer the network's .grad tensors point
  // into, so backward() accumulates straight into it. A fresh buffer each
  // step lets the previous one stay alive while ZeroMQ still sends it.
  torch::Tensor NewGradBuffer();

  // Name, size and a digest of parameter names and shapes in order.
  wire::ModelSignature signature() const { return signature_; }

 private:
  FlatModel() = default;
  void Bind();

  torch::nn::Sequential net_{nullptr};
  torch::Tensor params_;
  wire::ModelSignature signature_;
};

// optimizer.clip_norm, as torch.nn.utils.clip_grad_norm_: when the L2 norm
// of `grad` exceeds max_norm (> 0), scales it by max_norm / (norm + 1e-6)
// in place and returns true.
bool ClipGradient(torch::Tensor& grad, double max_norm);

// Normalized images [n, 1, rows, cols] and int64 labels [n] of the samples
// `indices` of `set` (all samples if null).
torch::Tensor ImagesTensor(const ImageSet& set, const std::vector<int64_t>* indices = nullptr);
torch::Tensor LabelsTensor(const ImageSet& set, const std::vector<int64_t>* indices = nullptr);

// Accuracy (0..1) of `model` on `images`/`labels`, in batches, without grad.
double Evaluate(FlatModel& model, const torch::Tensor& images, const torch::Tensor& labels, int64_t batch = 1000);

}  // namespace geodesic::worker
