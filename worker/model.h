// Models a worker trains, with all parameters (and their gradients) living
// in one flat float32 tensor, so that chunks of the flat vector can be
// pulled into and pushed out of the model without gathering tensors.
//
// Models: "cnn" (the reference CNN of docs/architecture.md, ~185k parameters), "mlp"
// (784 -> hidden... -> 10), "synthetic" (a flat vector of N parameters with
// no network, for communication benchmarks), "torchscript" (a module saved
// with torch.jit.save; its trainable parameters are the flat vector, its
// buffers stay local and are recomputed before evaluation, docs/models.md).
// Construction is seeded (or reads the same file), so every process
// building the same spec gets the same initial values.
// Not synchronized; one training thread owns a FlatModel.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "common/status.h"
#include "config/job.h"
#include "proto/geodesic.pb.h"
#include "worker/dataset.h"
#include "worker/objective.h"

namespace torch::jit {
struct Module;
}  // namespace torch::jit

namespace geodesic::worker {

// What a model takes and gives: samples [channels, rows, cols] and
// `classes` logits (the default is Fashion-MNIST's); or, for token data
// (context > 0), windows of `context` token ids below `vocab`, and the
// model's own loss.
struct SampleShape {
  int channels = 1, rows = 28, cols = 28, classes = 10;
  int context = 0;
  int64_t vocab = 0;
  std::string vocab_from{};  // what set `vocab`: data.vocab or the token file
  bool tokens() const { return context > 0; }
  std::string ToString() const;
};
SampleShape ShapeOf(const ImageSet& set);

class FlatModel {
 public:
  // For samples of `input`: cnn takes only Fashion-MNIST's; mlp any image
  // (its first layer takes channels * rows * cols values). A torchscript
  // module that is missing, unreadable or not float32 is an error naming
  // model.path; so is one with a `loss` method whose loss on a batch of two
  // samples of `input` is not a finite 0-dim float32 tensor, one without
  // whose forward does not map [2, channels, rows, cols] samples to
  // [2, classes] logits, and one without for token data. A module with
  // int attributes `context` and `vocab_size` is checked against the
  // data's (naming data.context and the token file).
  static StatusOr<std::unique_ptr<FlatModel>> Create(const ModelSpec& spec, uint64_t seed,
                                                     torch::Device device = torch::kCPU, SampleShape input = {});
  ~FlatModel();

  // Logits [batch, classes] for samples [batch, channels, rows, cols]. Not for "synthetic".
  torch::Tensor Forward(const torch::Tensor& images);
  // The objective's score of a batch (inputs x, targets y). Not for "synthetic".
  BatchScore Score(const torch::Tensor& x, const torch::Tensor& y) { return objective_->Score(x, y); }
  const Objective& objective() const { return *objective_; }
  bool has_network() const { return net_ || script_; }
  void train(bool on);

  // Buffers: tensors of the module that are not trained (BatchNorm's
  // running statistics); their values, 0 for the built-in models.
  int64_t num_buffer_values() const;
  const std::vector<torch::Tensor>& buffers() const { return buffers_; }
  // The training images RecomputeBuffers runs through the model.
  void SetBufferImages(torch::Tensor images) { buffer_images_ = std::move(images); }
  // For the weights as they are now: resets the buffers to the module's
  // saved values, then sets every buffer a train-mode forward keeps as a
  // running average (running = (1 - m) running + m batch) to the plain
  // average of its batch values over the buffer images, in batches of 256
  // (PreciseBN). m is measured on the first batch. Others keep their saved
  // values. Nothing without buffers or buffer images. Leaves train mode on.
  void RecomputeBuffers();

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
  Status LoadScript(const std::string& path, torch::Device device, const SampleShape& input);
  Status ProbeLoss(const std::string& where, torch::Device device, const SampleShape& input);
  Status ProbeLogits(const std::string& where, torch::Device device, const SampleShape& input);
  std::vector<torch::Tensor> Trainable() const;
  void Bind();

  torch::nn::Sequential net_{nullptr};
  std::unique_ptr<torch::jit::Module> script_;
  std::unique_ptr<Objective> objective_;
  std::vector<torch::Tensor> buffers_, saved_buffers_;
  torch::Tensor buffer_images_;
  torch::Tensor params_;
  wire::ModelSignature signature_;
};

// optimizer.clip_norm, as torch.nn.utils.clip_grad_norm_: when the L2 norm
// of `grad` exceeds max_norm (> 0), scales it by max_norm / (norm + 1e-6)
// in place and returns true.
bool ClipGradient(torch::Tensor& grad, double max_norm);

// Normalized samples [n, channels, rows, cols] (set.mean and set.std per
// channel) and int64 labels [n] of the samples `indices` of `set` (all
// samples if null).
torch::Tensor ImagesTensor(const ImageSet& set, const std::vector<int64_t>* indices = nullptr);
torch::Tensor LabelsTensor(const ImageSet& set, const std::vector<int64_t>* indices = nullptr);

// data.augment on a batch [n, c, h, w] in place: each sample mirrored
// left-right with probability 1/2 (flip) and shifted by a random offset in
// [-crop, crop] on each axis, the uncovered border zero (a random crop of
// the zero-padded sample). The draws come from `seed` alone.
void Augment(torch::Tensor& batch, const AugmentSpec& augment, uint64_t seed);
// The augmentation seed of worker `worker`'s step `step` in a job seeded `job_seed`.
uint64_t AugmentSeed(uint64_t job_seed, int worker, int64_t step);

// training.device as this machine can honour it: kCuda without a CUDA
// device (Debian's LibTorch has none) is InvalidArgument naming the key;
// kAuto is CUDA when there is one, else the CPU. `chose` (if set) receives
// what was chosen and why ("cpu (training.device auto: no CUDA device)").
StatusOr<torch::Device> ResolveDevice(TrainingDevice want, std::string* chose = nullptr);

// The mean loss of `model` on inputs `x` and targets `y` (every sample
// weighted alike), and its accuracy (0..1) where the objective measures
// one, in batches, without grad, after model.RecomputeBuffers(). 128 is
// eval.batch's default (config/job.h).
struct EvalScore {
  double loss = 0;
  std::optional<double> accuracy;
  int64_t samples = 0;
};
EvalScore ScoreOn(FlatModel& model, const torch::Tensor& x, const torch::Tensor& y, int64_t batch = 128);
// Its accuracy alone (0 for an objective without one).
double Evaluate(FlatModel& model, const torch::Tensor& images, const torch::Tensor& labels, int64_t batch = 128);

}  // namespace geodesic::worker
