#include "worker/model.h"

#include <gtest/gtest.h>

#include <set>

namespace geodesic::worker {
namespace {

TEST(ModelTest, ReferenceCnnHasTheDesignedSize) {
  auto m = FlatModel::Create(ModelSpec{}, 1);
  ASSERT_TRUE(m.ok());
  // conv 1->32 5x5, conv 32->64 5x5, linear 1024->128, linear 128->10.
  EXPECT_EQ((*m)->num_params(), 832 + 51264 + 131200 + 1290);
  auto logits = (*m)->Forward(torch::zeros({3, 1, 28, 28}));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 10}));
}

TEST(ModelTest, ParametersAreViewsOfTheFlatVector) {
  auto m = std::move(FlatModel::Create(ModelSpec{}, 1).value());
  torch::Tensor x = torch::randn({2, 1, 28, 28});
  torch::Tensor before = m->Forward(x).detach().clone();
  m->params().zero_();
  torch::Tensor after = m->Forward(x).detach();
  EXPECT_FALSE(torch::allclose(before, after));
  EXPECT_TRUE(torch::allclose(after, torch::zeros_like(after)));  // all weights and biases are zero
}

TEST(ModelTest, BackwardWritesIntoTheFlatGradBuffer) {
  ModelSpec spec;
  spec.name = ModelKind::kMlp;
  spec.mlp_hidden = {16};
  auto m = std::move(FlatModel::Create(spec, 1).value());
  torch::Tensor g = m->NewGradBuffer();
  auto loss = m->Forward(torch::randn({4, 1, 28, 28})).pow(2).sum();
  loss.backward();
  EXPECT_GT(g.abs().sum().item<double>(), 0.0);
  // The same gradients, gathered the slow way.
  std::vector<torch::Tensor> parts;
  torch::Tensor g2 = m->NewGradBuffer();  // a fresh, zeroed buffer is rebound
  EXPECT_EQ(g2.abs().sum().item<double>(), 0.0);
  EXPECT_GT(g.abs().sum().item<double>(), 0.0);  // the old one is untouched
}

TEST(ModelTest, SameSeedSameInitAndSignature) {
  auto a = std::move(FlatModel::Create(ModelSpec{}, 5).value());
  auto b = std::move(FlatModel::Create(ModelSpec{}, 5).value());
  EXPECT_TRUE(torch::equal(a->params(), b->params()));
  EXPECT_EQ(a->signature().layout_digest(), b->signature().layout_digest());
  ModelSpec mlp;
  mlp.name = ModelKind::kMlp;
  auto c = std::move(FlatModel::Create(mlp, 5).value());
  EXPECT_NE(a->signature().layout_digest(), c->signature().layout_digest());
  ModelSpec syn;
  syn.name = ModelKind::kSynthetic;
  syn.synthetic_params = 1000;
  auto d = std::move(FlatModel::Create(syn, 5).value());
  EXPECT_EQ(d->num_params(), 1000);
  EXPECT_FALSE(d->has_network());
}

TEST(ModelTest, EvaluateCountsCorrectPredictions) {
  ModelSpec spec;
  spec.name = ModelKind::kMlp;
  auto m = std::move(FlatModel::Create(spec, 1).value());
  m->params().zero_();  // every logit 0: argmax picks class 0
  torch::Tensor x = torch::zeros({4, 1, 28, 28});
  torch::Tensor y = torch::tensor({0, 0, 0, 3}, torch::kInt64);
  EXPECT_DOUBLE_EQ(Evaluate(*m, x, y, 3), 0.75);
}

TEST(ModelTest, ClippingMatchesTorchsClipGradNorm) {
  torch::manual_seed(5);
  for (double max_norm : {0.5, 3.0, 1e6}) {
    torch::Tensor g = torch::randn({1000});  // norm about 31.6
    torch::Tensor ref = torch::zeros({1000}, torch::requires_grad());
    ref.mutable_grad() = g.clone();
    torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{ref}, max_norm);
    const bool scaled = ClipGradient(g, max_norm);
    EXPECT_EQ(scaled, max_norm < 30);
    EXPECT_TRUE(torch::allclose(g, ref.grad(), 1e-6, 1e-7)) << max_norm;
    if (scaled) {
      EXPECT_NEAR(g.norm().item<double>(), max_norm, 1e-4);
    }
  }
  torch::Tensor g = torch::ones({4});
  EXPECT_FALSE(ClipGradient(g, 0));  // 0: off
  EXPECT_TRUE(torch::equal(g, torch::ones({4})));
}

TEST(ModelTest, ImagesAreNormalized) {
  ImageSet set;
  set.count = 2;
  set.rows = set.cols = 2;
  set.pixels = {0, 255, 0, 0, 10, 10, 10, 10};
  set.labels = {1, 2};
  std::vector<int64_t> idx = {1};
  auto img = ImagesTensor(set, &idx);
  EXPECT_EQ(img.sizes(), (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_NEAR(img[0][0][0][0].item<float>(), (10 / 255.0 - kFashionMean) / kFashionStd, 1e-5);
  EXPECT_EQ(LabelsTensor(set, &idx)[0].item<int64_t>(), 2);
  auto all = ImagesTensor(set);
  EXPECT_NEAR(all[0][0][0][1].item<float>(), (1.0 - kFashionMean) / kFashionStd, 1e-5);
}

TEST(ModelTest, EveryChannelHasItsOwnNormalization) {
  ImageSet set;
  set.count = 2;
  set.channels = 3;
  set.rows = 1;
  set.cols = 2;
  set.pixels = {0, 255, 51, 102, 255, 0, /*second sample*/ 1, 2, 3, 4, 5, 6};
  set.mean = {0.5f, 0.0f, 1.0f};
  set.std = {0.5f, 2.0f, 0.25f};
  auto img = ImagesTensor(set);
  EXPECT_EQ(img.sizes(), (std::vector<int64_t>{2, 3, 1, 2}));
  EXPECT_NEAR(img[0][0][0][0].item<float>(), -1.0, 1e-6);  // (0 - 0.5) / 0.5
  EXPECT_NEAR(img[0][0][0][1].item<float>(), 1.0, 1e-6);
  EXPECT_NEAR(img[0][1][0][1].item<float>(), 0.2, 1e-6);  // (102/255 - 0) / 2
  EXPECT_NEAR(img[0][2][0][0].item<float>(), 0.0, 1e-6);  // (1 - 1) / 0.25
  EXPECT_NEAR(img[1][2][0][1].item<float>(), (6 / 255.0 - 1) / 0.25, 1e-5);

  ImageSet f = set;  // float samples are taken as stored
  f.pixels.clear();
  f.values = {0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f, 9.f, 10.f, 11.f};
  auto fl = ImagesTensor(f);
  EXPECT_NEAR(fl[0][2][0][1].item<float>(), (5 - 1) / 0.25, 1e-5);
  EXPECT_NEAR(fl[1][0][0][0].item<float>(), (6 - 0.5) / 0.5, 1e-5);
}

TEST(ModelTest, AugmentFlipsAndShiftsWithZeroBorders) {
  torch::Tensor one = torch::arange(1, 10, torch::kFloat32).view({1, 1, 3, 3});
  // Over seeds: every result is the sample flipped or not, shifted by at
  // most 1 pixel, the uncovered border zero; and seeds decide it.
  std::set<std::vector<float>> seen;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    torch::Tensor x = one.clone();
    Augment(x, AugmentSpec{.crop = 1, .flip = true}, seed);
    torch::Tensor again = one.clone();
    Augment(again, AugmentSpec{.crop = 1, .flip = true}, seed);
    EXPECT_TRUE(torch::equal(x, again));
    bool matched = false;
    for (bool flip : {false, true})
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) {
          torch::Tensor src = flip ? one.flip({3}) : one, want = torch::zeros_like(one);
          for (int y = 0; y < 3; ++y)
            for (int c = 0; c < 3; ++c)
              if (y + dy >= 0 && y + dy < 3 && c + dx >= 0 && c + dx < 3) want[0][0][y][c] = src[0][0][y + dy][c + dx];
          matched |= torch::equal(x, want);
        }
    EXPECT_TRUE(matched) << x;
    seen.insert(std::vector<float>(x.data_ptr<float>(), x.data_ptr<float>() + 9));
  }
  EXPECT_GT(seen.size(), 10u);  // of 18 outcomes
  torch::Tensor x = one.clone();
  Augment(x, AugmentSpec{}, 5);
  EXPECT_TRUE(torch::equal(x, one));  // off: untouched
  EXPECT_NE(AugmentSeed(1, 0, 7), AugmentSeed(1, 1, 7));
  EXPECT_NE(AugmentSeed(1, 0, 7), AugmentSeed(1, 0, 8));
}

TEST(ModelTest, ModelsTakeTheDatasShape) {
  const SampleShape cifar{.channels = 3, .rows = 32, .cols = 32, .classes = 10};
  ModelSpec mlp;
  mlp.name = ModelKind::kMlp;
  mlp.mlp_hidden = {8};
  auto m = FlatModel::Create(mlp, 1, torch::kCPU, cifar);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->num_params(), 3 * 32 * 32 * 8 + 8 + 8 * 10 + 10);
  EXPECT_EQ((*m)->Forward(torch::zeros({2, 3, 32, 32})).sizes(), (std::vector<int64_t>{2, 10}));
  auto five = FlatModel::Create(mlp, 1, torch::kCPU, SampleShape{.classes = 5});
  ASSERT_TRUE(five.ok());
  EXPECT_EQ((*five)->Forward(torch::zeros({1, 1, 28, 28})).size(1), 5);
  auto cnn = FlatModel::Create(ModelSpec{}, 1, torch::kCPU, cifar);
  ASSERT_FALSE(cnn.ok());
  EXPECT_NE(cnn.status().message().find("model cnn takes 1x28x28 samples, 10 classes; the data has 3x32x32 samples"),
            std::string::npos)
      << cnn.status();
}

}  // namespace
}  // namespace geodesic::worker
