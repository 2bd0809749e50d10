#include "worker/model.h"

namespace geodesic::worker {
namespace {

namespace nn = torch::nn;

nn::Sequential MakeCnn() {
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 5)), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(nn::Conv2dOptions(32, 64, 5)), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                        nn::Linear(1024, 128), nn::ReLU(), nn::Linear(128, 10));
}

nn::Sequential MakeMlp(const std::vector<int>& hidden) {
  nn::Sequential s;
  s->push_back(nn::Flatten());
  int64_t in = 28 * 28;
  for (int h : hidden) {
    s->push_back(nn::Linear(in, h));
    s->push_back(nn::ReLU());
    in = h;
  }
  s->push_back(nn::Linear(in, 10));
  return s;
}

uint64_t Fnv1a(uint64_t h, const std::string& s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

StatusOr<std::unique_ptr<FlatModel>> FlatModel::Create(const ModelSpec& spec, uint64_t seed, torch::Device device) {
  std::unique_ptr<FlatModel> m(new FlatModel());
  torch::manual_seed(seed);
  m->signature_.set_name(ToString(spec.name));
  uint64_t digest = 14695981039346656037ull;
  if (spec.name == ModelKind::kCnn) {
    m->net_ = MakeCnn();
  } else if (spec.name == ModelKind::kMlp) {
    m->net_ = MakeMlp(spec.mlp_hidden);
  } else if (spec.name == ModelKind::kSynthetic) {
    m->params_ = torch::randn({spec.synthetic_params}, torch::TensorOptions().dtype(torch::kFloat32)) * 0.01;
    digest = Fnv1a(digest, "synthetic:" + std::to_string(spec.synthetic_params));
  } else {
    return InvalidArgument("unknown model '" + ToString(spec.name) + "'");
  }
  if (m->net_) {
    m->net_->to(device);
    for (const auto& p : m->net_->named_parameters()) {
      std::string shape;
      for (int64_t d : p.value().sizes()) shape += std::to_string(d) + "x";
      digest = Fnv1a(digest, p.key() + ":" + shape + ";");
    }
    m->Bind();
  }
  m->signature_.set_num_params(static_cast<uint64_t>(m->params_.numel()));
  m->signature_.set_layout_digest(digest);
  return m;
}

void FlatModel::Bind() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  for (auto& p : net_->parameters()) flat.push_back(p.detach().reshape(-1));
  params_ = torch::cat(flat).contiguous();
  int64_t off = 0;
  for (auto& p : net_->parameters()) {
    int64_t n = p.numel();
    // set_data makes the parameter share the flat tensor's storage.
    p.set_data(params_.narrow(0, off, n).view(p.sizes()));
    off += n;
  }
}

torch::Tensor FlatModel::NewGradBuffer() {
  torch::Tensor grad = torch::zeros_like(params_);
  if (!net_) return grad;
  int64_t off = 0;
  for (auto& p : net_->parameters()) {
    int64_t n = p.numel();
    p.mutable_grad() = grad.narrow(0, off, n).view(p.sizes());
    off += n;
  }
  return grad;
}

torch::Tensor FlatModel::Forward(const torch::Tensor& images) { return net_->forward(images); }

torch::Tensor ImagesTensor(const ImageSet& set, const std::vector<int64_t>* indices) {
  int64_t pixels = int64_t{set.rows} * set.cols;
  int64_t n = indices ? static_cast<int64_t>(indices->size()) : set.count;
  torch::Tensor out = torch::empty({n, 1, set.rows, set.cols}, torch::kFloat32);
  float* dst = out.data_ptr<float>();
  const float scale = 1.0f / (255.0f * kFashionStd), shift = kFashionMean / kFashionStd;
  for (int64_t i = 0; i < n; ++i) {
    int64_t src = indices ? (*indices)[i] : i;
    const uint8_t* p = set.pixels.data() + src * pixels;
    float* d = dst + i * pixels;
    for (int64_t k = 0; k < pixels; ++k) d[k] = static_cast<float>(p[k]) * scale - shift;
  }
  return out;
}

torch::Tensor LabelsTensor(const ImageSet& set, const std::vector<int64_t>* indices) {
  int64_t n = indices ? static_cast<int64_t>(indices->size()) : set.count;
  torch::Tensor out = torch::empty({n}, torch::kInt64);
  int64_t* dst = out.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) dst[i] = set.labels[indices ? (*indices)[i] : i];
  return out;
}

double Evaluate(FlatModel& model, const torch::Tensor& images, const torch::Tensor& labels, int64_t batch) {
  torch::NoGradGuard no_grad;
  model.train(false);
  int64_t n = images.size(0), correct = 0;
  for (int64_t i = 0; i < n; i += batch) {
    int64_t b = std::min(batch, n - i);
    auto logits = model.Forward(images.narrow(0, i, b));
    correct += logits.argmax(1).eq(labels.narrow(0, i, b)).sum().item<int64_t>();
  }
  model.train(true);
  return n ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
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

}  // namespace geodesic::worker
