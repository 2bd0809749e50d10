#include "worker/objective.h"

#include <torch/script.h>

namespace geodesic::worker {
namespace {

class Classifier final : public Objective {
 public:
  explicit Classifier(std::function<torch::Tensor(const torch::Tensor&)> forward) : forward_(std::move(forward)) {}

  BatchScore Score(const torch::Tensor& x, const torch::Tensor& y) override {
    torch::Tensor logits = forward_(x);
    BatchScore s;
    s.loss = torch::nn::functional::cross_entropy(logits, y);
    s.accuracy = logits.argmax(1).eq(y).to(torch::kFloat32).mean().item<double>();
    return s;
  }
  std::string name() const override { return "cross entropy over classes"; }
  bool classifies() const override { return true; }

 private:
  std::function<torch::Tensor(const torch::Tensor&)> forward_;
};

double Number(const c10::IValue& v) {
  if (v.isTensor() && v.toTensor().numel() == 1) return v.toTensor().item<double>();
  if (v.isDouble()) return v.toDouble();
  if (v.isInt()) return static_cast<double>(v.toInt());
  throw std::runtime_error("loss metrics must be 0-dim tensors or numbers");
}

class ScriptLoss final : public Objective {
 public:
  explicit ScriptLoss(torch::jit::Module* module) : module_(module) {}

  BatchScore Score(const torch::Tensor& x, const torch::Tensor& y) override {
    c10::IValue out = module_->get_method("loss")({x, y});
    BatchScore s;
    if (out.isTuple() && out.toTupleRef().elements().size() == 2) {
      const auto& e = out.toTupleRef().elements();
      if (!e[1].isGenericDict()) throw std::runtime_error("loss must return a tensor or (tensor, dict of metrics)");
      for (const auto& kv : e[1].toGenericDict()) s.metrics[kv.key().toStringRef()] = Number(kv.value());
      out = e[0];
    }
    if (!out.isTensor()) throw std::runtime_error("loss must return a 0-dim tensor");
    s.loss = out.toTensor();
    if (auto a = s.metrics.find("accuracy"); a != s.metrics.end()) {
      s.accuracy = a->second;
      s.metrics.erase(a);
    }
    return s;
  }
  std::string name() const override { return "the module's loss"; }
  bool classifies() const override { return false; }

 private:
  torch::jit::Module* module_;
};

}  // namespace

std::unique_ptr<Objective> ClassifierObjective(std::function<torch::Tensor(const torch::Tensor&)> forward) {
  return std::make_unique<Classifier>(std::move(forward));
}

std::unique_ptr<Objective> ScriptLossObjective(torch::jit::Module* module) {
  return std::make_unique<ScriptLoss>(module);
}

bool HasLossMethod(const torch::jit::Module& module) { return module.find_method("loss").has_value(); }

}  // namespace geodesic::worker
