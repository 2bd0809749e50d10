#include "worker/model.h"

#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>

namespace geodesic::worker {
namespace {

namespace nn = torch::nn;

nn::Sequential MakeCnn() {
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 5)), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(nn::Conv2dOptions(32, 64, 5)), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                        nn::Linear(1024, 128), nn::ReLU(), nn::Linear(128, 10));
}

nn::Sequential MakeMlp(const std::vector<int>& hidden, int64_t in, int64_t classes) {
  nn::Sequential s;
  s->push_back(nn::Flatten());
  for (int h : hidden) {
    s->push_back(nn::Linear(in, h));
    s->push_back(nn::ReLU());
    in = h;
  }
  s->push_back(nn::Linear(in, classes));
  return s;
}

uint64_t Fnv1a(uint64_t h, const std::string& s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string ShapeOf(const torch::Tensor& t) {
  std::string shape;
  for (int64_t d : t.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  return "[" + shape + "]";
}

// The first line of a LibTorch exception, which goes on with a C++ trace.
std::string FirstLine(const std::exception& e) {
  std::string what = e.what();
  return what.substr(0, what.find('\n'));
}

constexpr int64_t kBufferBatch = 256;

// An int attribute of the module, if it has one.
std::optional<int64_t> IntAttr(const torch::jit::Module& m, const std::string& name) {
  if (!m.hasattr(name)) return std::nullopt;
  c10::IValue v = m.attr(name);
  return v.isInt() ? std::optional<int64_t>(v.toInt()) : std::nullopt;
}

}  // namespace

FlatModel::~FlatModel() = default;

void FlatModel::train(bool on) {
  if (net_) net_->train(on);
  if (script_) script_->train(on);
}

std::vector<torch::Tensor> FlatModel::Trainable() const {
  if (net_) return net_->parameters();
  std::vector<torch::Tensor> out;
  if (script_)
    for (const auto& p : script_->parameters(true))
      if (p.requires_grad()) out.push_back(p);
  return out;
}

int64_t FlatModel::num_buffer_values() const {
  int64_t n = 0;
  for (const auto& b : buffers_) n += b.numel();
  return n;
}

std::string SampleShape::ToString() const {
  if (tokens()) return "windows of " + std::to_string(context) + " tokens, ids below " + std::to_string(vocab);
  return std::to_string(channels) + "x" + std::to_string(rows) + "x" + std::to_string(cols) + " samples, " +
         std::to_string(classes) + " classes";
}

SampleShape ShapeOf(const ImageSet& set) {
  SampleShape s;
  s.channels = set.channels;
  s.rows = set.rows;
  s.cols = set.cols;
  s.classes = set.classes;
  return s;
}

Status FlatModel::LoadScript(const std::string& path, torch::Device device, const SampleShape& input) {
  const std::string where = "model.path: " + path;
  if (!std::filesystem::is_regular_file(path)) return NotFound(where + " is not a file");
  try {
    script_ = std::make_unique<torch::jit::Module>(torch::jit::load(path, device));
  } catch (const std::exception& e) {
    return InvalidArgument(where + " is not a module saved with torch.jit.save: " + FirstLine(e));
  }
  for (const auto& p : Trainable())
    if (p.scalar_type() != torch::kFloat32) return InvalidArgument(where + ": trainable parameters must be float32");
  if (Trainable().empty()) return InvalidArgument(where + ": the module has no trainable parameters");
  for (const auto& b : script_->buffers(true)) {
    buffers_.push_back(b);
    saved_buffers_.push_back(b.clone());
  }
  torch::NoGradGuard ng;
  script_->eval();
  Status probed = HasLossMethod(*script_) ? ProbeLoss(where, device, input) : ProbeLogits(where, device, input);
  script_->train();
  return probed;
}

Status FlatModel::ProbeLoss(const std::string& where, torch::Device device, const SampleShape& input) {
  const auto opts = torch::TensorOptions().device(device);
  torch::Tensor x, y;
  if (input.tokens()) {
    if (auto c = IntAttr(*script_, "context"); c && input.context > *c)
      return InvalidArgument("data.context: " + std::to_string(input.context) + " tokens, longer than the " +
                             std::to_string(*c) + " positions of " + where);
    if (auto v = IntAttr(*script_, "vocab_size"); v && input.vocab > *v)
      return InvalidArgument(input.vocab_from + ": token ids up to " + std::to_string(input.vocab - 1) +
                             ", at or above the vocabulary of " + std::to_string(*v) + " of " + where);
    // The largest id the data holds, everywhere: an embedding too small fails here.
    x = torch::full({2, input.context}, input.vocab - 1, opts.dtype(torch::kInt64));
    y = x.clone();
  } else {
    x = torch::zeros({2, input.channels, input.rows, input.cols}, opts);
    y = torch::zeros({2}, opts.dtype(torch::kInt64));
  }
  const std::string batch = "a " + ShapeOf(x) + " batch of " + input.ToString();
  objective_ = ScriptLossObjective(script_.get());
  torch::Tensor loss;
  try {
    loss = objective_->Score(x, y).loss;
  } catch (const std::exception& e) {
    return InvalidArgument(where + ": loss on " + batch + " failed: " + FirstLine(e));
  }
  if (loss.dim() != 0 || loss.scalar_type() != torch::kFloat32 || !std::isfinite(loss.item<double>()))
    return InvalidArgument(where + ": loss on " + batch + " gives " + ShapeOf(loss) + " " +
                           std::string(c10::toString(loss.scalar_type())) +
                           (loss.numel() == 1 ? " " + std::to_string(loss.item<double>()) : std::string()) +
                           "; it must return a finite 0-dim float32 tensor");
  return Status::Ok();
}

Status FlatModel::ProbeLogits(const std::string& where, torch::Device device, const SampleShape& input) {
  if (input.tokens())
    return InvalidArgument(where + ": the module has no loss method, and token data (" + input.ToString() +
                           ") is not classification; define loss(x, y) (scripts/export_model.py gpt has one)");
  const torch::Tensor probe =
      torch::zeros({2, input.channels, input.rows, input.cols}, torch::TensorOptions().device(device));
  const std::string batch = "a " + ShapeOf(probe) + " batch";
  torch::Tensor out;
  try {
    auto result = script_->forward({probe});
    if (!result.isTensor()) return InvalidArgument(where + ": forward must return one tensor of logits");
    out = result.toTensor();
  } catch (const std::exception& e) {
    return InvalidArgument(where + ": forward on " + batch + " failed: " + FirstLine(e));
  }
  if (out.dim() != 2 || out.size(0) != 2 || out.size(1) != input.classes || out.scalar_type() != torch::kFloat32)
    return InvalidArgument(where + ": forward maps " + batch + " to " + ShapeOf(out) + "; the data (" +
                           input.ToString() + ") needs float32 logits [2, " + std::to_string(input.classes) + "]");
  return Status::Ok();
}

namespace {

// The block a parameter belongs to: its name up to the first numbered part
// ("blocks.3.attn.qkv.weight" is in "blocks.3"), or its first part ("tok.weight"
// in "tok"); a Sequential's "0.weight" is in "0".
std::string BlockOf(const std::string& name) {
  for (size_t begin = 0; begin < name.size();) {
    const size_t end = std::min(name.find('.', begin), name.size());
    const bool numbered = end > begin && std::all_of(name.begin() + begin, name.begin() + end,
                                                     [](char c) { return c >= '0' && c <= '9'; });
    if (numbered) return name.substr(0, end);
    begin = end + 1;
  }
  return name.substr(0, std::min(name.find('.'), name.size()));
}

// Offsets in the flat vector where a new block's parameters begin.
struct BlockStarts {
  std::vector<uint64_t> starts;
  std::string last;
  uint64_t offset = 0;
  void Add(const std::string& name, int64_t numel) {
    std::string block = BlockOf(name);
    if (starts.empty() || block != last) starts.push_back(offset);
    last = std::move(block);
    offset += static_cast<uint64_t>(numel);
  }
};

}  // namespace

StatusOr<std::unique_ptr<FlatModel>> FlatModel::Create(const ModelSpec& spec, uint64_t seed, torch::Device device,
                                                       SampleShape input) {
  std::unique_ptr<FlatModel> m(new FlatModel());
  torch::manual_seed(seed);
  m->signature_.set_name(ToString(spec.name));
  uint64_t digest = 14695981039346656037ull;
  const SampleShape fashion;
  if (input.tokens() && (spec.name == ModelKind::kCnn || spec.name == ModelKind::kMlp))
    return InvalidArgument("model " + ToString(spec.name) + " takes images; token data (" + input.ToString() +
                           ") needs a torchscript module with a loss");
  if (spec.name == ModelKind::kCnn) {
    if (input.channels != fashion.channels || input.rows != fashion.rows || input.cols != fashion.cols ||
        input.classes != fashion.classes)
      return InvalidArgument("model cnn takes " + fashion.ToString() + "; the data has " + input.ToString() +
                             " (use mlp or torchscript)");
    m->net_ = MakeCnn();
  } else if (spec.name == ModelKind::kMlp) {
    m->net_ = MakeMlp(spec.mlp_hidden, int64_t{input.channels} * input.rows * input.cols, input.classes);
  } else if (spec.name == ModelKind::kTorchScript) {
    GD_RETURN_IF_ERROR(m->LoadScript(spec.path, device, input));
  } else if (spec.name == ModelKind::kSynthetic) {
    m->params_ = torch::randn({spec.synthetic_params}, torch::TensorOptions().dtype(torch::kFloat32)) * 0.01;
    digest = Fnv1a(digest, "synthetic:" + std::to_string(spec.synthetic_params));
  } else {
    return InvalidArgument("unknown model '" + ToString(spec.name) + "'");
  }
  BlockStarts blocks;
  if (m->net_) {
    m->net_->to(device);
    for (const auto& p : m->net_->named_parameters()) {
      digest = Fnv1a(digest, p.key() + ":" + ShapeOf(p.value()) + ";");
      blocks.Add(p.key(), p.value().numel());
    }
  }
  if (m->script_)
    for (const auto& p : m->script_->named_parameters(true))
      if (p.value.requires_grad()) {
        digest = Fnv1a(digest, p.name + ":" + ShapeOf(p.value) + ";");
        blocks.Add(p.name, p.value.numel());
      }
  for (uint64_t b : blocks.starts) m->signature_.add_block_starts(b);
  if (m->has_network()) m->Bind();
  if (m->has_network() && !m->objective_) {
    FlatModel* self = m.get();
    m->objective_ = ClassifierObjective([self](const torch::Tensor& x) { return self->Forward(x); });
  }
  m->signature_.set_num_params(static_cast<uint64_t>(m->params_.numel()));
  m->signature_.set_layout_digest(digest);
  return m;
}

void FlatModel::Bind() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  for (auto& p : Trainable()) flat.push_back(p.detach().reshape(-1));
  params_ = torch::cat(flat).contiguous();
  int64_t off = 0;
  for (auto& p : Trainable()) {
    int64_t n = p.numel();
    // set_data makes the parameter share the flat tensor's storage.
    p.set_data(params_.narrow(0, off, n).view(p.sizes()));
    off += n;
  }
}

torch::Tensor FlatModel::NewGradBuffer() {
  torch::Tensor grad = torch::zeros_like(params_);
  if (!has_network()) return grad;
  int64_t off = 0;
  for (auto& p : Trainable()) {
    int64_t n = p.numel();
    p.mutable_grad() = grad.narrow(0, off, n).view(p.sizes());
    off += n;
  }
  return grad;
}

torch::Tensor FlatModel::Forward(const torch::Tensor& images) {
  if (script_) return script_->forward({images}).toTensor();
  return net_->forward(images);
}

void FlatModel::RecomputeBuffers() {
  if (buffers_.empty() || !buffer_images_.defined() || buffer_images_.size(0) == 0) return;
  torch::NoGradGuard ng;
  train(true);
  auto set_all = [&](const std::function<void(size_t)>& f) {
    for (size_t i = 0; i < buffers_.size(); ++i) f(i);
  };
  auto floating = [&](size_t i) { return buffers_[i].is_floating_point(); };
  const int64_t n = buffer_images_.size(0);
  // Whole batches only (a train-mode BatchNorm refuses a batch of one).
  const int64_t size = std::min(kBufferBatch, n), batches = n / size;
  auto batch = [&](int64_t b) { return buffer_images_.narrow(0, b * size, size).to(params_.device()); };
  // m of each buffer: one forward from 1s, one from 0s; r1 - r0 = 1 - m.
  set_all([&](size_t i) { buffers_[i].copy_(floating(i) ? torch::ones_like(buffers_[i]) : saved_buffers_[i]); });
  Forward(batch(0));
  std::vector<torch::Tensor> from_ones(buffers_.size());
  set_all([&](size_t i) { from_ones[i] = buffers_[i].clone(); });
  std::vector<double> m(buffers_.size(), 0.0);
  std::vector<torch::Tensor> sum(buffers_.size());
  for (int64_t b = 0; b < batches; ++b) {
    set_all([&](size_t i) {
      if (floating(i)) buffers_[i].zero_();
    });
    Forward(batch(b));
    set_all([&](size_t i) {
      if (!floating(i)) return;
      if (b == 0) m[i] = 1.0 - (from_ones[i] - buffers_[i]).mean().item<double>();
      if (m[i] < 1e-6) return;
      torch::Tensor value = buffers_[i] / m[i];
      sum[i] = b == 0 ? value : sum[i] + value;
    });
  }
  set_all(
      [&](size_t i) { buffers_[i].copy_(m[i] < 1e-6 ? saved_buffers_[i] : sum[i] / static_cast<double>(batches)); });
}

torch::Tensor ImagesTensor(const ImageSet& set, const std::vector<int64_t>* indices) {
  const int64_t plane = int64_t{set.rows} * set.cols, size = set.sample_size();
  const int64_t n = indices ? static_cast<int64_t>(indices->size()) : set.count;
  torch::Tensor out = torch::empty({n, set.channels, set.rows, set.cols}, torch::kFloat32);
  float* dst = out.data_ptr<float>();
  for (int c = 0; c < set.channels; ++c) {
    const float mean = set.mean.empty() ? kFashionMean : set.mean[c];
    const float std = set.std.empty() ? kFashionStd : set.std[c];
    // uint8: x = p / 255 scaled and shifted in one multiply-add, as always.
    const float scale = set.is_float() ? 1.0f / std : 1.0f / (255.0f * std), shift = mean / std;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t src = (indices ? (*indices)[i] : i) * size + c * plane;
      float* d = dst + i * size + c * plane;
      if (set.is_float())
        for (int64_t k = 0; k < plane; ++k) d[k] = set.values[src + k] * scale - shift;
      else
        for (int64_t k = 0; k < plane; ++k) d[k] = static_cast<float>(set.pixels[src + k]) * scale - shift;
    }
  }
  return out;
}

uint64_t AugmentSeed(uint64_t job_seed, int worker, int64_t step) {
  uint64_t h = job_seed * 0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(worker) + 1) * 0xbf58476d1ce4e5b9ull;
  return h ^ (static_cast<uint64_t>(step) + 1) * 0x94d049bb133111ebull;
}

void Augment(torch::Tensor& batch, const AugmentSpec& augment, uint64_t seed) {
  if (augment.crop == 0 && !augment.flip) return;
  torch::NoGradGuard ng;
  std::mt19937_64 rng(seed);
  const int64_t h = batch.size(2), w = batch.size(3), pad = augment.crop;
  auto draw = [&](int64_t span) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(span)); };
  for (int64_t i = 0; i < batch.size(0); ++i) {
    torch::Tensor x = batch[i];
    if (augment.flip && draw(2) == 1) x.copy_(x.flip({2}));
    if (pad == 0) continue;
    const int64_t dy = draw(2 * pad + 1) - pad, dx = draw(2 * pad + 1) - pad;
    if (dy == 0 && dx == 0) continue;
    torch::Tensor moved = torch::zeros_like(x);
    const int64_t rows = h - std::abs(dy), cols = w - std::abs(dx);
    if (rows > 0 && cols > 0)
      moved.narrow(1, std::max<int64_t>(0, -dy), rows)
          .narrow(2, std::max<int64_t>(0, -dx), cols)
          .copy_(x.narrow(1, std::max<int64_t>(0, dy), rows).narrow(2, std::max<int64_t>(0, dx), cols));
    x.copy_(moved);
  }
}

torch::Tensor LabelsTensor(const ImageSet& set, const std::vector<int64_t>* indices) {
  int64_t n = indices ? static_cast<int64_t>(indices->size()) : set.count;
  torch::Tensor out = torch::empty({n}, torch::kInt64);
  int64_t* dst = out.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) dst[i] = set.labels[indices ? (*indices)[i] : i];
  return out;
}

EvalScore ScoreOn(FlatModel& model, const torch::Tensor& x, const torch::Tensor& y, int64_t batch) {
  model.RecomputeBuffers();
  torch::NoGradGuard no_grad;
  model.train(false);
  EvalScore e;
  e.samples = x.size(0);
  double loss = 0, correct = 0;
  bool accurate = true;
  for (int64_t i = 0; i < e.samples; i += batch) {
    const int64_t b = std::min(batch, e.samples - i);
    BatchScore s = model.Score(x.narrow(0, i, b), y.narrow(0, i, b));
    loss += s.loss.item<double>() * static_cast<double>(b);
    accurate &= s.accuracy.has_value();
    // A classifier's accuracy is a count of right answers: kept exact.
    const double right = s.accuracy ? *s.accuracy * static_cast<double>(b) : 0;
    correct += model.objective().classifies() ? std::round(right) : right;
  }
  model.train(true);
  const double n = static_cast<double>(std::max<int64_t>(1, e.samples));
  e.loss = loss / n;
  if (accurate && e.samples > 0) e.accuracy = correct / n;
  return e;
}

double Evaluate(FlatModel& model, const torch::Tensor& images, const torch::Tensor& labels, int64_t batch) {
  return ScoreOn(model, images, labels, batch).accuracy.value_or(0.0);
}

bool ClipGradient(torch::Tensor& grad, double max_norm) {
  if (max_norm <= 0) return false;
  torch::NoGradGuard ng;
  const double norm = grad.norm().item<double>();
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return false;
  grad.mul_(coef);
  return true;
}

StatusOr<torch::Device> ResolveDevice(TrainingDevice want, std::string* chose) {
  const bool cuda = torch::cuda::is_available();
  if (want == TrainingDevice::kCuda && !cuda)
    return InvalidArgument(
        "training.device: cuda, but this machine has no CUDA device (this LibTorch build or this machine has none); "
        "use cpu, or auto to take a GPU where there is one");
  const bool use_cuda = want == TrainingDevice::kCuda || (want == TrainingDevice::kAuto && cuda);
  if (chose)
    *chose = std::string(use_cuda ? "cuda" : "cpu") + " (training.device " + ToString(want) +
             (want != TrainingDevice::kAuto ? ")"
              : cuda                        ? ": a CUDA device is present)"
                                            : ": no CUDA device)");
  return use_cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

}  // namespace geodesic::worker
