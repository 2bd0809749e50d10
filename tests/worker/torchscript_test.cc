// model: torchscript. The modules come from scripts/export_model.py run by
// Debian's python3 (python3-torch, the LibTorch the build links).
#include <gtest/gtest.h>
#include <torch/script.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cluster/chunking.h"
#include "tests/test_paths.h"
#include "worker/examples.h"
#include "worker/federated_rounds.h"
#include "worker/model.h"
#include "worker/objective.h"

namespace geodesic::worker {
namespace {

namespace fs = std::filesystem;

class TorchScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("geodesic-ts-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Exports `model` (export_model.py's names) with `args`; its path.
  std::string Export(const std::string& model, const std::string& args = "") {
    const std::string out = (dir_ / (model + ".pt")).string();
    const std::string cmd = "/usr/bin/python3 " + ::geodesic::testing::SourcePath("scripts/export_model.py ") + model +
                            " " + out + " " + args + " > /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return out;
  }
  // Saves a scripted module written in TorchScript source.
  std::string Script(const std::string& name, const std::string& source) {
    const std::string py = (dir_ / (name + ".py")).string(), out = (dir_ / (name + ".pt")).string();
    std::ofstream(py) << "import torch\n" << source << "\ntorch.jit.save(torch.jit.script(M()), '" << out << "')\n";
    EXPECT_EQ(std::system(("/usr/bin/python3 " + py).c_str()), 0) << py;
    return out;
  }
  static ModelSpec Spec(const std::string& path) {
    ModelSpec spec;
    spec.name = ModelKind::kTorchScript;
    spec.path = path;
    return spec;
  }
  static std::string Error(const std::string& path) {
    auto m = FlatModel::Create(Spec(path), 1);
    EXPECT_FALSE(m.ok()) << path;
    return m.ok() ? "" : m.status().ToString();
  }

  fs::path dir_;
};

TEST_F(TorchScriptTest, ScriptedCnnComputesWhatTheBuiltInCnnComputes) {
  auto builtin = std::move(FlatModel::Create(ModelSpec{}, 3).value());
  auto script = std::move(FlatModel::Create(Spec(Export("cnn")), 3).value());
  ASSERT_EQ(script->num_params(), builtin->num_params());
  EXPECT_EQ(script->num_params(), 184586);
  EXPECT_EQ(script->num_buffer_values(), 0);
  EXPECT_EQ(script->signature().name(), "torchscript");
  EXPECT_FALSE(torch::equal(script->params(), builtin->params()));  // its own initial values
  script->params().copy_(builtin->params());

  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({8, 1, 28, 28});
  const torch::Tensor y = torch::randint(0, 10, {8});
  auto step = [&](FlatModel& m) {
    torch::Tensor g = m.NewGradBuffer();
    torch::Tensor logits = m.Forward(x);
    torch::nn::functional::cross_entropy(logits, y).backward();
    return std::make_pair(logits.detach(), g);
  };
  auto [la, ga] = step(*builtin);
  auto [lb, gb] = step(*script);
  EXPECT_TRUE(torch::allclose(la, lb, 1e-5, 1e-6));
  EXPECT_GT(ga.abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(torch::allclose(ga, gb, 1e-4, 1e-6));  // the gradient lands in the flat buffer
}

TEST_F(TorchScriptTest, SameFileSameLayoutDigestAndTheSeedIsTheFiles) {
  const std::string path = Export("cnn-bn");
  auto a = std::move(FlatModel::Create(Spec(path), 1).value());
  auto b = std::move(FlatModel::Create(Spec(path), 99).value());
  EXPECT_TRUE(torch::equal(a->params(), b->params()));
  EXPECT_EQ(a->signature().layout_digest(), b->signature().layout_digest());
  auto other = std::move(FlatModel::Create(Spec(Export("cnn")), 1).value());
  EXPECT_NE(a->signature().layout_digest(), other->signature().layout_digest());
}

// PreciseBN: the first BatchNorm's running mean and variance become the
// average over batches of the batch mean and unbiased variance of conv1's
// output, computed here by hand from a second copy of the module.
TEST_F(TorchScriptTest, BuffersAreRecomputedFromBatchStatistics) {
  const std::string path = Export("cnn-bn");
  auto m = std::move(FlatModel::Create(Spec(path), 1).value());
  // Buffers: per BatchNorm running_mean [C], running_var [C], num_batches_tracked.
  ASSERT_EQ(m->buffers().size(), 6u);
  EXPECT_EQ(m->num_buffer_values(), 16 + 16 + 1 + 32 + 32 + 1);
  torch::manual_seed(5);
  m->params().copy_(torch::randn({m->num_params()}) * 0.1);
  const torch::Tensor images = torch::randn({600, 1, 28, 28});  // 2 whole batches of 256; 88 unused
  m->SetBufferImages(images);
  m->RecomputeBuffers();

  torch::jit::Module copy = torch::jit::load(path);
  torch::jit::Module conv1 = copy.attr("0").toModule();
  {
    torch::NoGradGuard ng;
    conv1.attr("weight").toTensor().copy_(m->params().narrow(0, 0, 16 * 9).view({16, 1, 3, 3}));
  }
  torch::Tensor mean = torch::zeros({16}), var = torch::zeros({16});
  for (int b = 0; b < 2; ++b) {
    torch::Tensor out = conv1.forward({images.narrow(0, b * 256, 256)}).toTensor();
    mean += out.mean({0, 2, 3}) / 2;
    var += out.transpose(0, 1).reshape({16, -1}).var(1, /*unbiased=*/true) / 2;
  }
  EXPECT_TRUE(torch::allclose(m->buffers()[0], mean, 1e-4, 1e-5)) << m->buffers()[0] << mean;
  EXPECT_TRUE(torch::allclose(m->buffers()[1], var, 1e-4, 1e-5)) << m->buffers()[1] << var;
  EXPECT_EQ(m->buffers()[2].item<int64_t>(), 0);  // the counter keeps its saved value
  const torch::Tensor first = m->buffers()[4].clone();
  m->RecomputeBuffers();  // depends on the weights and images only
  EXPECT_TRUE(torch::allclose(m->buffers()[4], first, 1e-5, 1e-6));

  // Evaluation recomputes them, then runs in eval mode: the same logits as
  // the second copy given the flat parameters and the buffers by hand.
  Evaluate(*m, images, torch::zeros({600}, torch::kInt64));
  EXPECT_TRUE(torch::allclose(m->buffers()[4], first, 1e-5, 1e-6));
  torch::NoGradGuard ng;
  int64_t off = 0;
  for (const auto& p : copy.parameters()) {
    p.copy_(m->params().narrow(0, off, p.numel()).view(p.sizes()));
    off += p.numel();
  }
  size_t i = 0;
  for (const auto& b : copy.buffers()) b.copy_(m->buffers()[i++]);
  copy.eval();
  m->train(false);
  EXPECT_TRUE(torch::allclose(copy.forward({images.narrow(0, 0, 16)}).toTensor(), m->Forward(images.narrow(0, 0, 16)),
                              1e-5, 1e-6));
}

// torchvision's ResNet-18 (scripts/export_model.py resnet18): 20 BatchNorms,
// its 11M-value gradient lands in the flat buffer, and recomputing the buffers
// moves every running mean off its saved zeros.
TEST_F(TorchScriptTest, ResNet18TrainsAndItsBuffersAreRecomputed) {
  auto m = std::move(FlatModel::Create(Spec(Export("resnet18")), 1).value());
  EXPECT_EQ(m->num_params(), 11172810);
  EXPECT_EQ(m->num_buffer_values(), 9620);
  ASSERT_EQ(m->buffers().size(), 20u * 3);
  torch::manual_seed(2);
  const torch::Tensor x = torch::randn({4, 1, 28, 28});
  torch::Tensor g = m->NewGradBuffer();
  torch::nn::functional::cross_entropy(m->Forward(x), torch::randint(0, 10, {4})).backward();
  EXPECT_EQ(g.isfinite().all().item<bool>(), true);
  EXPECT_GT(g.abs().sum().item<double>(), 0.0);
  m->SetBufferImages(torch::randn({256, 1, 28, 28}));
  m->RecomputeBuffers();
  for (size_t i = 0; i < m->buffers().size(); i += 3)
    EXPECT_GT(m->buffers()[i].abs().sum().item<double>(), 0.0) << "running_mean " << i / 3;
}

TEST_F(TorchScriptTest, BuffersStayWithoutBufferImages) {
  auto m = std::move(FlatModel::Create(Spec(Export("cnn-bn")), 1).value());
  const torch::Tensor before = m->buffers()[1].clone();
  m->RecomputeBuffers();
  EXPECT_TRUE(torch::equal(m->buffers()[1], before));
}

TEST_F(TorchScriptTest, BadModulesAreRefusedNamingThePath) {
  const std::string missing = (dir_ / "missing.pt").string();
  EXPECT_NE(Error(missing).find("model.path: " + missing + " is not a file"), std::string::npos);

  const std::string garbage = (dir_ / "garbage.pt").string();
  std::ofstream(garbage) << "not a zip archive\n";
  EXPECT_NE(Error(garbage).find("is not a module saved with torch.jit.save"), std::string::npos) << Error(garbage);

  const std::string rgb = Export("cnn", "--channels 3");
  EXPECT_NE(Error(rgb).find(rgb + ": forward on a [2, 1, 28, 28] batch failed"), std::string::npos) << Error(rgb);

  const std::string five = Script("five",
                                  "class M(torch.nn.Module):\n"
                                  "    def __init__(self):\n"
                                  "        super().__init__()\n"
                                  "        self.fc = torch.nn.Linear(784, 5)\n"
                                  "    def forward(self, x):\n"
                                  "        return self.fc(x.flatten(1))\n");
  EXPECT_NE(Error(five).find("maps a [2, 1, 28, 28] batch to [2, 5]"), std::string::npos) << Error(five);

  const std::string frozen = Script("frozen",
                                    "class M(torch.nn.Module):\n"
                                    "    def __init__(self):\n"
                                    "        super().__init__()\n"
                                    "        self.fc = torch.nn.Linear(784, 10)\n"
                                    "        self.fc.requires_grad_(False)\n"
                                    "    def forward(self, x):\n"
                                    "        return self.fc(x.flatten(1))\n");
  EXPECT_NE(Error(frozen).find("has no trainable parameters"), std::string::npos) << Error(frozen);

  const std::string dbl = Script("double",
                                 "class M(torch.nn.Module):\n"
                                 "    def __init__(self):\n"
                                 "        super().__init__()\n"
                                 "        self.fc = torch.nn.Linear(784, 10).double()\n"
                                 "    def forward(self, x):\n"
                                 "        return self.fc(x.flatten(1).double()).float()\n");
  EXPECT_NE(Error(dbl).find("trainable parameters must be float32"), std::string::npos) << Error(dbl);
}

TEST_F(TorchScriptTest, TheProbeUsesTheDatasShape) {
  const std::string rgb = Script("rgb",
                                 "class M(torch.nn.Module):\n"
                                 "    def __init__(self):\n"
                                 "        super().__init__()\n"
                                 "        self.conv = torch.nn.Conv2d(3, 4, 3)\n"
                                 "        self.fc = torch.nn.Linear(4 * 30 * 30, 10)\n"
                                 "    def forward(self, x):\n"
                                 "        return self.fc(self.conv(x).flatten(1))\n");
  const SampleShape cifar{.channels = 3, .rows = 32, .cols = 32, .classes = 10};
  auto m = FlatModel::Create(Spec(rgb), 1, torch::kCPU, cifar);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->Forward(torch::zeros({5, 3, 32, 32})).sizes(), (std::vector<int64_t>{5, 10}));
  EXPECT_NE(Error(rgb).find("forward on a [2, 1, 28, 28] batch failed"), std::string::npos) << Error(rgb);
  auto classes = FlatModel::Create(Spec(rgb), 1, torch::kCPU, SampleShape{3, 32, 32, 100});
  ASSERT_FALSE(classes.ok());
  EXPECT_NE(classes.status().message().find("to [2, 10]; the data (3x32x32 samples, 100 classes) needs float32 "
                                            "logits [2, 100]"),
            std::string::npos)
      << classes.status();
}

// Models with their own loss (worker/objective.h): scripts/export_model.py's
// GPT on token windows.
SampleShape Tokens(int context, int64_t vocab) {
  return SampleShape{.context = context, .vocab = vocab, .vocab_from = "train.bin"};
}

TEST_F(TorchScriptTest, GptTrainsOnItsOwnLoss) {
  const std::string gpt = Export("gpt", "--size tiny");
  auto m = std::move(FlatModel::Create(Spec(gpt), 1, torch::kCPU, Tokens(64, 256)).value());
  EXPECT_EQ(m->num_params(), 136960);
  EXPECT_EQ(m->num_buffer_values(), 0);
  EXPECT_FALSE(m->objective().classifies());
  // Its blocks: tok (256 x 64), pos (64 x 64), blocks.0 and blocks.1 (49,984
  // each), ln and head; streaming fragments follow them.
  const wire::ModelSignature sig = m->signature();
  EXPECT_EQ(std::vector<uint64_t>(sig.block_starts().begin(), sig.block_starts().end()),
            (std::vector<uint64_t>{0, 16384, 20480, 70464, 120448, 120576}));
  // In 9 chunks of 64 KiB, three fragments: tok, pos and blocks.0; blocks.1; ln and head.
  const cluster::ChunkLayout layout(136960, 16384, {sig.block_starts().begin(), sig.block_starts().end()});
  EXPECT_EQ(cluster::FragmentCuts(layout, 3), (std::vector<uint32_t>{0, 4, 7, 9}));
  torch::manual_seed(1);
  const torch::Tensor x = torch::randint(0, 256, {4, 64}, torch::kInt64), y = torch::randint(0, 256, {4, 64});
  torch::Tensor g = m->NewGradBuffer();
  BatchScore s = m->Score(x, y);
  EXPECT_FALSE(s.accuracy.has_value());
  EXPECT_NEAR(s.loss.item<double>(), std::log(256.0), 0.1);  // uniform at initialization
  s.loss.backward();
  EXPECT_GT(g.abs().sum().item<double>(), 0.0);  // the gradient lands in the flat buffer
  // The loss is the module's: cross entropy of its own logits.
  torch::NoGradGuard ng;
  torch::jit::Module copy = torch::jit::load(gpt);
  torch::Tensor logits = copy.forward({x}).toTensor();
  EXPECT_NEAR(torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), y.reshape({-1})).item<double>(),
              m->Score(x, y).loss.item<double>(), 1e-5);
  // Evaluation: the mean loss, weighted by samples, no accuracy.
  EvalScore e = ScoreOn(*m, x, y, 3);
  EXPECT_FALSE(e.accuracy.has_value());
  EXPECT_NEAR(e.loss, m->Score(x, y).loss.item<double>(), 1e-5);
}

// Federated clients of a language model: each client is a set of whole
// documents (data.partition documents), trains the module's own loss on
// its windows, and the round's FedAvg step lowers the loss on the clients'
// data. No client accuracy is asked of a model that has none.
TEST_F(TorchScriptTest, FederatedClientsTrainTheGptOnTheirOwnDocuments) {
  TokenSet set;
  set.context = 16;
  set.file = "train.bin";
  for (int d = 0; d < 8; ++d) {  // eight documents of 200 to 550 tokens, each a repeated phrase
    set.doc_starts.push_back(set.tokens.size());
    for (int i = 0; i < 200 + 50 * d; ++i) set.tokens.push_back(static_cast<uint32_t>(97 + (i * (d + 1)) % 7));
  }
  set.max_token = 103;
  JobSpec job;
  job.seed = 3;
  job.model = Spec(Export("gpt", "--size tiny"));
  job.data.dataset = DatasetKind::kTokens;
  job.data.context = 16;
  job.data.batch_size = 4;
  job.data.partition.kind = DataPartition::kDocuments;
  job.federated.clients = 4;
  job.federated.per_round = 4;
  job.federated.local_steps = 3;
  job.federated.local_lr = 0.1;
  ASSERT_GT(job.federated.client_eval_samples, 0);  // asked, and skipped: no accuracy

  ClientSplit split = std::move(ClientSplitOf(job, set)).value();
  ASSERT_EQ(split.clients.size(), 4u);
  std::vector<int> owner(8, -1);
  for (int c = 0; c < 4; ++c)
    for (int64_t w : split.clients[c]) {
      int& o = owner[set.DocumentOf(w)];
      EXPECT_TRUE(o == -1 || o == c) << "document " << set.DocumentOf(w) << " is split between clients";
      o = c;
    }
  // A real client holds its own windows alone, numbered from 0.
  ClientSplit own = std::move(ClientSplitOf(job, set, 2)).value();
  EXPECT_EQ(own.digest, split.digest);
  ASSERT_EQ(own.examples.size(), static_cast<int64_t>(split.clients[2].size()));
  EXPECT_TRUE(own.clients[0].empty());
  EXPECT_EQ(own.clients[2].front(), 0);
  EXPECT_TRUE(torch::equal(own.examples.x, split.examples.Rows(split.clients[2]).x));

  auto rounds = std::move(FederatedRounds::Create(job, 0, split)).value();
  auto model = std::move(FlatModel::Create(job.model, job.seed, torch::kCPU, split.shape)).value();
  auto loss = [&] { return ScoreOn(*model, split.examples.x, split.examples.y).loss; };
  const double before = loss();
  std::vector<float> x(model->params().data_ptr<float>(), model->params().data_ptr<float>() + model->num_params());
  std::vector<float> push(x.size());
  RoundReport r = std::move(rounds->Run(0, x.data(), push.data())).value();
  EXPECT_EQ(r.trained, 4);
  EXPECT_EQ(r.mean_accuracy, -1.0);
  EXPECT_TRUE(r.client_accuracy.empty());
  EXPECT_TRUE(std::isfinite(r.mean_loss));
  for (size_t j = 0; j < x.size(); ++j) model->params().data_ptr<float>()[j] = x[j] - push[j];  // FedAvg, outer lr 1
  EXPECT_LT(loss(), before - 0.1);
}

TEST_F(TorchScriptTest, TokenDataThatTheModuleCannotTakeIsRefused) {
  const std::string gpt = Export("gpt", "--size tiny");
  auto error = [&](const std::string& path, SampleShape shape) {
    auto m = FlatModel::Create(Spec(path), 1, torch::kCPU, shape);
    return m.ok() ? std::string() : m.status().ToString();
  };
  EXPECT_NE(error(gpt, Tokens(65, 256)).find("data.context: 65 tokens, longer than the 64 positions of model.path"),
            std::string::npos)
      << error(gpt, Tokens(65, 256));
  EXPECT_NE(error(gpt, Tokens(64, 300)).find("train.bin: token ids up to 299, at or above the vocabulary of 256"),
            std::string::npos)
      << error(gpt, Tokens(64, 300));
  EXPECT_NE(error(gpt, SampleShape{}).find("loss on a [2, 1, 28, 28] batch"), std::string::npos);
  // Without the attributes, the probe at the largest id finds it.
  const std::string bare = Script("bare",
                                  "class M(torch.nn.Module):\n"
                                  "    def __init__(self):\n"
                                  "        super().__init__()\n"
                                  "        self.emb = torch.nn.Embedding(100, 4)\n"
                                  "    def forward(self, x):\n"
                                  "        return self.emb(x)\n"
                                  "    @torch.jit.export\n"
                                  "    def loss(self, x, y):\n"
                                  "        return self.emb(x).square().mean()\n");
  EXPECT_TRUE(error(bare, Tokens(16, 100)).empty()) << error(bare, Tokens(16, 100));
  EXPECT_NE(error(bare, Tokens(16, 101)).find("loss on a [2, 16] batch of windows of 16 tokens, ids below 101 failed"),
            std::string::npos)
      << error(bare, Tokens(16, 101));
  const std::string logits_only = Export("cnn");
  EXPECT_NE(error(logits_only, Tokens(16, 256)).find("has no loss method, and token data"), std::string::npos);
  auto cnn = FlatModel::Create(ModelSpec{}, 1, torch::kCPU, Tokens(16, 256));
  EXPECT_NE(cnn.status().message().find("model cnn takes images"), std::string::npos) << cnn.status();
}

TEST_F(TorchScriptTest, ALossThatIsNotAFiniteScalarIsRefused) {
  // A linear classifier of Fashion-MNIST's images whose loss is `body`.
  auto loss_module = [&](const std::string& name, const std::string& signature, const std::string& body) {
    return Script(name,
                  "from typing import Dict, Tuple\n"
                  "class M(torch.nn.Module):\n"
                  "    def __init__(self):\n"
                  "        super().__init__()\n"
                  "        self.fc = torch.nn.Linear(784, 10)\n"
                  "    def forward(self, x):\n"
                  "        return self.fc(x.flatten(1))\n"
                  "    @torch.jit.export\n"
                  "    def loss(self, x, y)" +
                      signature + ":\n" + body);
  };
  const std::string vector = loss_module("vector", "", "        return self.forward(x).mean(1)\n");
  EXPECT_NE(Error(vector).find("gives [2] Float"), std::string::npos) << Error(vector);
  EXPECT_NE(Error(vector).find("it must return a finite 0-dim float32 tensor"), std::string::npos);
  const std::string nan = loss_module("nan", "", "        return self.forward(x).mean() * float('nan')\n");
  EXPECT_NE(Error(nan).find("gives [] Float nan"), std::string::npos) << Error(nan);
  // A loss with metrics: "accuracy" is reported as accuracy, the rest by name.
  const std::string metrics = loss_module("metrics", " -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]",
                                          "        z = self.forward(x)\n"
                                          "        l = torch.nn.functional.cross_entropy(z, y)\n"
                                          "        a = (z.argmax(1) == y).float().mean()\n"
                                          "        return l, {'accuracy': a, 'margin': z.max() - z.min()}\n");
  auto m = std::move(FlatModel::Create(Spec(metrics), 1).value());
  const torch::Tensor x = torch::randn({8, 1, 28, 28}), y = torch::randint(0, 10, {8});
  BatchScore s = m->Score(x, y);
  ASSERT_TRUE(s.accuracy.has_value());
  EXPECT_NEAR(*s.accuracy, m->Forward(x).argmax(1).eq(y).to(torch::kFloat32).mean().item<double>(), 1e-6);
  EXPECT_EQ(s.metrics.count("margin"), 1u);
  EXPECT_TRUE(ScoreOn(*m, x, y).accuracy.has_value());
}

}  // namespace
}  // namespace geodesic::worker
