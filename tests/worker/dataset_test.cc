#include "worker/dataset.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <set>

namespace geodesic::worker {
namespace {

const char* kDebianPath = "/usr/share/datasets/fashion-mnist";

std::string TempDir() {
  std::string d = std::filesystem::temp_directory_path() / ("gd-dataset-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d;
}

void WriteGz(const std::string& path, const std::string& bytes, size_t cut = std::string::npos) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  if (cut != std::string::npos) std::filesystem::resize_file(path, cut);
}

std::string Idx(uint32_t magic, std::vector<uint32_t> dims, size_t data_bytes) {
  std::string s;
  auto be = [&](uint32_t v) {
    for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  be(magic);
  for (uint32_t d : dims) be(d);
  s.append(data_bytes, '\x01');
  return s;
}

TEST(DatasetTest, LoadsTheDebianTestSplit) {
  auto set = LoadFashionMnist(kDebianPath, "test");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->count, 10000);
  EXPECT_EQ(set->rows, 28);
  EXPECT_EQ(set->cols, 28);
  EXPECT_EQ(set->pixels.size(), 10000u * 784);
  std::set<int> labels(set->labels.begin(), set->labels.end());
  EXPECT_EQ(labels.size(), 10u);
}

TEST(DatasetTest, MissingDatasetNamesTheDebianPackage) {
  auto set = LoadFashionMnist("/nonexistent/fashion", "train");
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), Code::kNotFound);
  EXPECT_NE(set.status().message().find("apt-get install dataset-fashion-mnist"), std::string::npos);
  EXPECT_EQ(LoadFashionMnist(kDebianPath, "validation").status().code(), Code::kInvalidArgument);
}

TEST(DatasetTest, CorruptFilesAreDataLoss) {
  std::string dir = TempDir();
  std::string p = dir + "/x.gz";
  std::vector<uint32_t> dims;
  WriteGz(p, Idx(0x803, {2, 28, 28}, 2 * 784 - 1));  // one byte short
  auto r = ReadIdxGz(p, 0x803, &dims);
  EXPECT_EQ(r.status().code(), Code::kDataLoss);
  EXPECT_NE(r.status().message().find("promises"), std::string::npos) << r.status();
  WriteGz(p, Idx(0x801, {5}, 5));
  EXPECT_EQ(ReadIdxGz(p, 0x803, &dims).status().code(), Code::kDataLoss);  // wrong magic
  WriteGz(p, Idx(0x801, {5}, 5000), 40);                                   // truncated gzip stream
  EXPECT_EQ(ReadIdxGz(p, 0x801, &dims).status().code(), Code::kDataLoss);
  WriteGz(p, "abc");
  EXPECT_EQ(ReadIdxGz(p, 0x801, &dims).status().code(), Code::kDataLoss);
  WriteGz(p, Idx(0x801, {5}, 5));
  auto ok = ReadIdxGz(p, 0x801, &dims);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(dims, std::vector<uint32_t>{5});
  std::filesystem::remove_all(dir);
}

// A head read decompresses only as far as the items it keeps: a file whose
// gzip stream is cut after them reads, and the same file read whole does not.
TEST(DatasetTest, AHeadReadStopsAtTheItemsItKeeps) {
  std::string dir = TempDir();
  std::string p = dir + "/x.gz";
  std::string idx = Idx(0x803, {200, 28, 28}, 0);
  uint32_t x = 1;
  for (int i = 0; i < 200 * 784; ++i) idx.push_back(static_cast<char>((x = x * 1664525u + 1013904223u) >> 24));
  WriteGz(p, idx);
  const auto whole = std::filesystem::file_size(p);
  WriteGz(p, idx, whole / 2);
  std::vector<uint32_t> dims;
  EXPECT_EQ(ReadIdxGz(p, 0x803, &dims).status().code(), Code::kDataLoss);
  auto head = ReadIdxGz(p, 0x803, &dims, 10);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(dims, (std::vector<uint32_t>{10, 28, 28}));
  EXPECT_EQ(std::string(head->begin(), head->end()), idx.substr(16, 10 * 784));
  WriteGz(p, Idx(0x801, {5}, 5));
  auto more = ReadIdxGz(p, 0x801, &dims, 9);  // asks for more than there are: all of them
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(dims, std::vector<uint32_t>{5});
  EXPECT_EQ(more->size(), 5u);
  std::filesystem::remove_all(dir);
}

TEST(DatasetTest, TheHeadOfASplitIsItsFirstSamples) {
  auto all = LoadFashionMnist(kDebianPath, "test");
  auto head = LoadFashionMnist(kDebianPath, "test", 100);
  ASSERT_TRUE(all.ok() && head.ok()) << all.status() << head.status();
  EXPECT_EQ(head->count, 100);
  EXPECT_EQ(head->pixels, std::vector<uint8_t>(all->pixels.begin(), all->pixels.begin() + 100 * 784));
  EXPECT_EQ(head->labels, std::vector<uint8_t>(all->labels.begin(), all->labels.begin() + 100));
  ImageSet kept = *all;
  KeepHead(100, &kept);
  EXPECT_EQ(kept.pixels, head->pixels);
  EXPECT_EQ(kept.labels, head->labels);
  EXPECT_EQ(kept.count, 100);
}

TEST(PartitionTest, IidSlicesAreDisjointCompleteAndSeeded) {
  std::set<int64_t> all;
  size_t total = 0;
  for (int w = 0; w < 3; ++w) {
    auto part = IidPartition(100, 3, w, 7);
    EXPECT_GE(part.size(), 33u);
    total += part.size();
    all.insert(part.begin(), part.end());
  }
  EXPECT_EQ(total, 100u);
  EXPECT_EQ(all.size(), 100u);
  EXPECT_EQ(IidPartition(100, 3, 1, 7), IidPartition(100, 3, 1, 7));
  EXPECT_NE(IidPartition(100, 3, 1, 7), IidPartition(100, 3, 1, 8));
}

}  // namespace
}  // namespace geodesic::worker
