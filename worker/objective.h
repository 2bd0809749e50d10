// What a model's training minimizes and its evaluation reports. A
// TorchScript module that defines a method `loss(x, y)` brings its own
// objective (a language model's next-token cross entropy, a regression's
// squared error); every other model is a classifier of [batch, classes]
// logits under cross entropy, with accuracy. docs/models.md has the
// contract. Not synchronized; the thread that owns the model.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace torch::jit {
struct Module;
}  // namespace torch::jit

namespace geodesic::worker {

// One batch's score: its mean loss (with its graph when grad is on), and
// what else the objective measures.
struct BatchScore {
  torch::Tensor loss;                       // 0-dim float32
  std::optional<double> accuracy{};         // classifiers; or a loss's "accuracy" metric
  std::map<std::string, double> metrics{};  // a loss's other metrics
};

class Objective {
 public:
  virtual ~Objective() = default;
  virtual BatchScore Score(const torch::Tensor& x, const torch::Tensor& y) = 0;
  // "cross-entropy over classes" or "the module's loss", for logs and errors.
  virtual std::string name() const = 0;
  virtual bool classifies() const = 0;
};

// Cross entropy of `forward(x)`'s logits [batch, classes] against labels
// y [batch], and the share of argmax predictions that are right.
std::unique_ptr<Objective> ClassifierObjective(std::function<torch::Tensor(const torch::Tensor&)> forward);

// `module`.loss(x, y): a 0-dim tensor, or a tuple of one and a dict of
// named metrics (0-dim tensors or floats); "accuracy" among them is
// reported as accuracy. The module must outlive the objective.
std::unique_ptr<Objective> ScriptLossObjective(torch::jit::Module* module);

// Whether `module` defines a method `loss`.
bool HasLossMethod(const torch::jit::Module& module);

}  // namespace geodesic::worker
