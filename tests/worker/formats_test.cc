// CIFAR-10 binary batches and safetensors files, written here byte by byte:
// what is read is what was written, and every malformed file is an error
// naming the file (and the tensor).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "worker/dataset.h"

namespace geodesic::worker {
namespace {

namespace fs = std::filesystem;

class FormatsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gd-formats-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  // `n` CIFAR-10 records: label i % 10, pixel k of record i is (i + k) % 256.
  static std::string CifarRecords(int n, int first = 0) {
    std::string s;
    for (int i = first; i < first + n; ++i) {
      s.push_back(static_cast<char>(i % 10));
      for (int k = 0; k < 3072; ++k) s.push_back(static_cast<char>((i + k) % 256));
    }
    return s;
  }
  // A safetensors file of the given header (tensors' data_offsets filled in
  // from `data`, in order) and data blobs.
  static std::string Safetensors(nlohmann::json header, const std::vector<std::pair<std::string, std::string>>& data) {
    std::string blob;
    for (const auto& [name, bytes] : data) {
      header[name]["data_offsets"] = {blob.size(), blob.size() + bytes.size()};
      blob += bytes;
    }
    const std::string h = header.dump();
    std::string out(8, '\0');
    uint64_t n = h.size();
    std::memcpy(out.data(), &n, 8);
    return out + h + blob;
  }
  template <typename T>
  static std::string Bytes(const std::vector<T>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  static std::string ErrorOf(const StatusOr<ImageSet>& s) { return s.ok() ? "ok" : s.status().ToString(); }

  fs::path dir_;
};

TEST_F(FormatsTest, Cifar10ReadsEveryRecordInFileOrder) {
  Write("data_batch_1.bin", CifarRecords(3));
  Write("data_batch_2.bin", CifarRecords(2, 3));
  Write("test_batch.bin", CifarRecords(4));
  auto train = LoadCifar10(dir_.string(), "train");
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->count, 5);
  EXPECT_EQ(train->channels, 3);
  EXPECT_EQ(train->rows, 32);
  EXPECT_EQ(train->cols, 32);
  EXPECT_EQ(train->classes, 10);
  EXPECT_EQ(train->labels, (std::vector<uint8_t>{0, 1, 2, 3, 4}));
  ASSERT_EQ(train->pixels.size(), 5u * 3072);
  for (int i = 0; i < 5; ++i)
    for (int k : {0, 1023, 1024, 3071}) EXPECT_EQ(train->pixels[i * 3072 + k], (i + k) % 256) << i << " " << k;
  auto test = LoadCifar10(dir_.string(), "test");
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->count, 4);
}

TEST_F(FormatsTest, ACifar10HeadReadsNoFileBeyondTheSamplesItKeeps) {
  Write("data_batch_1.bin", CifarRecords(3));
  Write("data_batch_2.bin", "not whole records");
  EXPECT_NE(ErrorOf(LoadCifar10(dir_.string(), "train")).find("data_batch_2.bin"), std::string::npos);
  auto head = LoadCifar10(dir_.string(), "train", 3);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->count, 3);
  EXPECT_EQ(head->labels, (std::vector<uint8_t>{0, 1, 2}));
}

TEST_F(FormatsTest, Cifar10FindsTheArchivesDirectory) {
  fs::create_directories(dir_ / "cifar-10-batches-bin");
  Write("cifar-10-batches-bin/data_batch_1.bin", CifarRecords(1));
  Write("cifar-10-batches-bin/test_batch.bin", CifarRecords(1));
  EXPECT_TRUE(LoadCifar10(dir_.string(), "train").ok());
}

TEST_F(FormatsTest, BadCifar10FilesNameTheFile) {
  auto missing = LoadCifar10(dir_.string(), "test");
  EXPECT_NE(ErrorOf(missing).find("test_batch.bin is missing"), std::string::npos) << ErrorOf(missing);
  const std::string cut = Write("test_batch.bin", CifarRecords(2).substr(0, 5000));
  auto short_file = LoadCifar10(dir_.string(), "test");
  EXPECT_NE(ErrorOf(short_file).find(cut + ": 5000 bytes is not a whole number"), std::string::npos)
      << ErrorOf(short_file);
  std::string bad = CifarRecords(2);
  bad[3073] = 12;
  Write("test_batch.bin", bad);
  auto label = LoadCifar10(dir_.string(), "test");
  EXPECT_NE(ErrorOf(label).find("record 1 has label 12 outside 0..9"), std::string::npos) << ErrorOf(label);
  EXPECT_FALSE(LoadCifar10(dir_.string(), "validation").ok());
}

TEST_F(FormatsTest, SafetensorsU8AndF32ImagesOfEveryRank) {
  const std::vector<uint8_t> pixels = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<int64_t> labels = {0, 3};
  nlohmann::json h = {{"images", {{"dtype", "U8"}, {"shape", {2, 3, 1, 2}}}},
                      {"labels", {{"dtype", "I64"}, {"shape", {2}}}}};
  auto set =
      LoadSafetensors(Write("a.safetensors", Safetensors(h, {{"images", Bytes(pixels)}, {"labels", Bytes(labels)}})));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->count, 2);
  EXPECT_EQ(set->channels, 3);
  EXPECT_EQ(set->rows, 1);
  EXPECT_EQ(set->cols, 2);
  EXPECT_EQ(set->pixels, pixels);
  EXPECT_EQ(set->labels, (std::vector<uint8_t>{0, 3}));
  EXPECT_EQ(set->classes, 4);  // largest label + 1 without metadata

  const std::vector<float> values = {0.5f, -1.25f, 3.0f, 1e-3f, 7.0f, -0.0f};
  const std::vector<int32_t> small = {1, 0, 1};
  nlohmann::json f = {{"images", {{"dtype", "F32"}, {"shape", {3, 2}}}},
                      {"labels", {{"dtype", "I32"}, {"shape", {3}}}},
                      {"__metadata__", {{"classes", "10"}}}};
  auto flat =
      LoadSafetensors(Write("f.safetensors", Safetensors(f, {{"labels", Bytes(small)}, {"images", Bytes(values)}})));
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(flat->count, 3);
  EXPECT_EQ(flat->sample_size(), 2);
  EXPECT_TRUE(flat->is_float());
  EXPECT_EQ(flat->values, values);  // bit for bit
  EXPECT_EQ(flat->classes, 10);
}

TEST_F(FormatsTest, MalformedSafetensorsNameTheFileAndTensor) {
  const std::vector<uint8_t> px(8, 1);
  const std::vector<uint8_t> lab = {0, 1};
  const nlohmann::json good = {{"images", {{"dtype", "U8"}, {"shape", {2, 2, 2}}}},
                               {"labels", {{"dtype", "U8"}, {"shape", {2}}}}};
  auto expect = [&](const std::string& bytes, const std::string& says) {
    const std::string path = Write("bad.safetensors", bytes);
    auto s = LoadSafetensors(path);
    EXPECT_NE(ErrorOf(s).find(path), std::string::npos) << ErrorOf(s);
    EXPECT_NE(ErrorOf(s).find(says), std::string::npos) << ErrorOf(s);
  };
  const std::string ok = Safetensors(good, {{"images", Bytes(px)}, {"labels", Bytes(lab)}});
  ASSERT_TRUE(LoadSafetensors(Write("ok.safetensors", ok)).ok());
  expect("1234", "too short");
  expect(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "does not fit");
  expect(std::string("\x04\0\0\0\0\0\0\0", 8) + "nope", "not a JSON object");
  expect(ok.substr(0, ok.size() - 3), "outside the file's");
  nlohmann::json no_labels = good;
  no_labels.erase("labels");
  expect(Safetensors(no_labels, {{"images", Bytes(px)}}), "tensor 'labels' is missing");
  nlohmann::json wrong = good;
  wrong["images"]["shape"] = {2, 3, 2};
  expect(Safetensors(wrong, {{"images", Bytes(px)}, {"labels", Bytes(lab)}}), "needs 12 bytes, data_offsets give 8");
  nlohmann::json f16 = good;
  f16["images"]["dtype"] = "F16";
  expect(Safetensors(f16, {{"images", Bytes(px)}, {"labels", Bytes(lab)}}), "tensor 'images': dtype F16");
  nlohmann::json count = good;
  count["labels"]["shape"] = {1};
  expect(Safetensors(count, {{"images", Bytes(px)}, {"labels", Bytes(std::vector<uint8_t>{0})}}),
         "tensor 'labels': shape must be [2]");
  nlohmann::json classes = good;
  classes["__metadata__"] = {{"classes", "2"}};
  expect(Safetensors(classes, {{"images", Bytes(px)}, {"labels", Bytes(std::vector<uint8_t>{0, 2})}}),
         "label 2 of sample 1 outside 0..1");
  const std::vector<float> nan = {0, 0, 0, 0, 0, 0, 0, std::nanf("")};
  nlohmann::json fl = good;
  fl["images"]["dtype"] = "F32";
  expect(Safetensors(fl, {{"images", Bytes(nan)}, {"labels", Bytes(lab)}}), "not finite");
  EXPECT_NE(ErrorOf(LoadSafetensors((dir_ / "none.safetensors").string())).find("is missing"), std::string::npos);
}

TEST_F(FormatsTest, LoadDatasetSetsTheNormalizationPerChannel) {
  const std::vector<uint8_t> px(2 * 3 * 4, 7);
  const std::vector<uint8_t> lab = {0, 1};
  nlohmann::json h = {{"images", {{"dtype", "U8"}, {"shape", {2, 3, 2, 2}}}},
                      {"labels", {{"dtype", "U8"}, {"shape", {2}}}},
                      {"__metadata__", {{"mean", "0.5,0.25,0.125"}, {"std", "2,4,8"}}}};
  Write("train.safetensors", Safetensors(h, {{"images", Bytes(px)}, {"labels", Bytes(lab)}}));
  DataSpec data;
  data.dataset = DatasetKind::kSafetensors;
  data.path = dir_.string();
  auto set = LoadDataset(data, "train");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->mean, (std::vector<float>{0.5f, 0.25f, 0.125f}));
  EXPECT_EQ(set->std, (std::vector<float>{2, 4, 8}));
  data.mean = {0.1, 0.2, 0.3};
  data.std = {1, 1, 1};
  set = LoadDataset(data, "train");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->mean, (std::vector<float>{0.1f, 0.2f, 0.3f}));  // the job's win
  data.mean = {0.1};
  data.std = {1};
  EXPECT_NE(ErrorOf(LoadDataset(data, "train")).find("data.mean has 1 values; " + dir_.string() + " has 3 channel"),
            std::string::npos);
  auto missing = LoadDataset(data, "test");
  EXPECT_NE(ErrorOf(missing).find("data.path: safetensors file " + (dir_ / "test.safetensors").string()),
            std::string::npos)
      << ErrorOf(missing);

  h["__metadata__"]["std"] = "2,0,8";
  Write("train.safetensors", Safetensors(h, {{"images", Bytes(px)}, {"labels", Bytes(lab)}}));
  data.mean.clear();
  data.std.clear();
  EXPECT_NE(ErrorOf(LoadDataset(data, "train")).find("__metadata__ std '2,0,8'"), std::string::npos);

  Write("data_batch_1.bin", CifarRecords(2));
  data.dataset = DatasetKind::kCifar10;
  set = LoadDataset(data, "train");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->mean, (std::vector<float>{0.4914f, 0.4822f, 0.4465f}));
}

TEST_F(FormatsTest, SubsetKeepsShapeNormalizationAndOrder) {
  Write("data_batch_1.bin", CifarRecords(4));
  auto set = LoadCifar10(dir_.string(), "train");
  ASSERT_TRUE(set.ok()) << set.status();
  set->mean = {1, 2, 3};
  const ImageSet sub = Subset(*set, {3, 1});
  EXPECT_EQ(sub.count, 2);
  EXPECT_EQ(sub.channels, 3);
  EXPECT_EQ(sub.mean, set->mean);
  EXPECT_EQ(sub.labels, (std::vector<uint8_t>{3, 1}));
  ASSERT_EQ(sub.pixels.size(), 2u * 3072);
  EXPECT_TRUE(std::equal(sub.pixels.begin(), sub.pixels.begin() + 3072, set->pixels.begin() + 3 * 3072));
}

TEST_F(FormatsTest, EpochsNeedTheTrainingSetsSize) {
  JobSpec job;
  job.data.dataset = DatasetKind::kCifar10;
  job.data.path = "/data/cifar";
  ImageSet train;
  train.count = 2000;
  const Status s = CheckTrainingSet(job, train);
  EXPECT_NE(s.message().find("data.train_samples: the job counts training.epochs over 50000 training samples, but "
                             "/data/cifar has 2000; set data.train_samples: 2000"),
            std::string::npos)
      << s;
  job.data.train_samples = 2000;
  EXPECT_TRUE(CheckTrainingSet(job, train).ok());
  job.data.train_samples = 0;
  job.training.steps = 10;  // steps: no epochs to count
  EXPECT_TRUE(CheckTrainingSet(job, train).ok());
}

}  // namespace
}  // namespace geodesic::worker
