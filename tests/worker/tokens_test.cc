// Token data (worker/tokens.h) and its windows as examples
// (worker/examples.h): files written here byte by byte.
#include "worker/tokens.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "tests/scratch_dir.h"
#include "worker/examples.h"

namespace geodesic::worker {
namespace {

using ::geodesic::testing::ScratchDir;

// Little-endian values of `width` bytes each.
template <typename T>
void WriteLe(const std::string& path, const std::vector<T>& values, int width) {
  std::ofstream out(path, std::ios::binary);
  for (T v : values)
    for (int b = 0; b < width; ++b) out.put(static_cast<char>((static_cast<uint64_t>(v) >> (8 * b)) & 0xff));
}

class TokensTest : public ::testing::Test {
 protected:
  // train.bin of `n` tokens (id i % 251), documents every `doc` tokens,
  // groups of `per_group` documents; val.bin of 100 tokens.
  void Write(int64_t n, int64_t doc = 0, int per_group = 0, int width = 2) {
    std::vector<uint32_t> t(n);
    for (int64_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>(i % 251);
    WriteLe(dir_ / "train.bin", t, width);
    WriteLe(dir_ / "val.bin", std::vector<uint32_t>(t.begin(), t.begin() + 100), width);
    std::filesystem::remove(dir_ / "train.docs");
    std::filesystem::remove(dir_ / "train.groups");
    if (doc > 0) {
      std::vector<uint64_t> starts;
      for (int64_t s = 0; s < n; s += doc) starts.push_back(static_cast<uint64_t>(s));
      WriteLe(dir_ / "train.docs", starts, 8);
      if (per_group > 0) {
        std::vector<uint32_t> groups;
        for (size_t d = 0; d < starts.size(); ++d) groups.push_back(static_cast<uint32_t>(d / per_group));
        WriteLe(dir_ / "train.groups", groups, 4);
      }
    }
    data_.token_bytes = width;
  }
  StatusOr<TokenSet> Load(const std::string& split = "train") { return LoadTokens(data_, split); }

  ScratchDir dir_{"gd-tokens"};
  DataSpec data_ = [this] {
    DataSpec d;
    d.dataset = DatasetKind::kTokens;
    d.path = dir_.path();
    d.context = 8;
    return d;
  }();
};

TEST_F(TokensTest, WindowsAreContextTokensAndTheirNextTokenTargets) {
  Write(1000);
  TokenSet set = Load().value();
  EXPECT_EQ(set.tokens.size(), 1000u);
  EXPECT_EQ(set.windows(), 999 / 8);  // every token but the first predicted once an epoch
  EXPECT_EQ(set.max_token, 250u);
  std::vector<int64_t> pick = {0, 3, 123};  // 123: the last whole window
  Examples e = TokenExamples(set, &pick);
  ASSERT_EQ(e.x.sizes(), (std::vector<int64_t>{3, 8}));
  EXPECT_TRUE(e.tokens());
  for (int r = 0; r < 3; ++r)
    for (int k = 0; k < 8; ++k) {
      const int64_t at = pick[r] * 8 + k;
      EXPECT_EQ(e.x[r][k].item<int64_t>(), at % 251);
      EXPECT_EQ(e.y[r][k].item<int64_t>(), (at + 1) % 251);
    }
  EXPECT_EQ(Load("test").value().tokens.size(), 100u);  // "test" is val.bin
}

TEST_F(TokensTest, ReadsUint32Ids) {
  Write(500, 0, 0, 4);
  TokenSet set = Load().value();
  EXPECT_EQ(set.tokens[250], 250u % 251);
  EXPECT_EQ(set.tokens.size(), 500u);
}

TEST_F(TokensTest, BadFilesAreErrorsNamingTheFileOrKey) {
  Write(1000);
  std::filesystem::resize_file(dir_ / "train.bin", 1999);
  EXPECT_NE(Load().status().message().find("1999 bytes is not a whole number of 2-byte token ids"), std::string::npos)
      << Load().status();
  EXPECT_NE(Load().status().message().find(dir_ / "train.bin"), std::string::npos);

  Write(1000);
  data_.vocab = 200;
  EXPECT_NE(Load().status().message().find("token id 250 is at or above data.vocab 200"), std::string::npos)
      << Load().status();
  data_.vocab = 0;

  std::filesystem::resize_file(dir_ / "val.bin", 2 * 5);
  EXPECT_NE(Load("test").status().message().find("fewer than one window of 8 + 1 (data.context)"), std::string::npos)
      << Load("test").status();

  std::filesystem::remove(dir_ / "train.bin");
  EXPECT_EQ(Load().status().code(), Code::kNotFound);
  EXPECT_NE(Load().status().message().find("convert_dataset.py text"), std::string::npos);
}

TEST_F(TokensTest, BadDocumentFilesAreErrors) {
  Write(1000, 100, 2);
  WriteLe<uint64_t>(dir_ / "train.docs", {0, 300, 200}, 8);
  EXPECT_NE(Load().status().message().find("not increasing"), std::string::npos) << Load().status();
  WriteLe<uint64_t>(dir_ / "train.docs", {5, 300}, 8);
  EXPECT_NE(Load().status().message().find("must start at offset 0"), std::string::npos) << Load().status();
  WriteLe<uint64_t>(dir_ / "train.docs", {0, 5000}, 8);
  EXPECT_NE(Load().status().message().find("not increasing within the 1000 tokens"), std::string::npos);
  WriteLe<uint64_t>(dir_ / "train.docs", {0, 300}, 8);
  EXPECT_NE(Load().status().message().find("10 groups for 2 documents"), std::string::npos) << Load().status();
}

TEST_F(TokensTest, IidPartitionCoversEveryWindowOnce) {
  Write(4001);
  TokenSet set = Load().value();
  auto parts = PartitionWindows(set, 3, {.kind = DataPartition::kIid}, 7).value();
  std::set<int64_t> seen;
  for (const auto& p : parts) {
    EXPECT_NEAR(static_cast<double>(p.size()), set.windows() / 3.0, 1.0);
    for (int64_t w : p) EXPECT_TRUE(seen.insert(w).second);
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), set.windows());
  EXPECT_EQ(parts, PartitionWindows(set, 3, {.kind = DataPartition::kIid}, 7).value());  // seeded
  EXPECT_NE(parts, PartitionWindows(set, 3, {.kind = DataPartition::kIid}, 8).value());
}

TEST_F(TokensTest, DocumentAndGroupPartitionsKeepEachTogether) {
  Write(8000, 160, 5);  // 50 documents of 20 windows, 10 groups of 5 documents
  TokenSet set = Load().value();
  ASSERT_EQ(set.doc_starts.size(), 50u);
  EXPECT_EQ(set.DocumentOf(0), 0);
  EXPECT_EQ(set.DocumentOf(19), 0);
  EXPECT_EQ(set.DocumentOf(20), 1);
  for (DataPartition kind : {DataPartition::kDocuments, DataPartition::kGroups}) {
    auto parts = PartitionWindows(set, 4, {.kind = kind}, 3).value();
    std::map<int64_t, int> owner;  // document or group -> part
    int64_t total = 0;
    for (int p = 0; p < 4; ++p) {
      total += static_cast<int64_t>(parts[p].size());
      for (int64_t w : parts[p]) {
        const int64_t d = set.DocumentOf(w), unit = kind == DataPartition::kGroups ? set.doc_groups[d] : d;
        auto [it, fresh] = owner.emplace(unit, p);
        EXPECT_EQ(it->second, p) << ToString(kind) << " unit " << unit << " split across parts";
      }
      // Dealt to the lightest part: near-equal tokens.
      const double share = static_cast<double>(parts[p].size()) / static_cast<double>(set.windows());
      EXPECT_NEAR(share, 0.25, kind == DataPartition::kGroups ? 0.1 : 0.03) << ToString(kind);
    }
    EXPECT_EQ(total, set.windows());
  }
}

TEST_F(TokensTest, DocumentPartitionsNeedTheirSideFiles) {
  Write(2000, 100);
  TokenSet set = Load().value();
  auto groups = PartitionWindows(set, 2, {.kind = DataPartition::kGroups}, 1);
  EXPECT_NE(groups.status().message().find("needs " + (dir_ / "train.groups")), std::string::npos) << groups.status();
  Write(2000);
  set = Load().value();
  auto docs = PartitionWindows(set, 2, {.kind = DataPartition::kDocuments}, 1);
  EXPECT_NE(docs.status().message().find("train.docs"), std::string::npos) << docs.status();
  Write(2000, 1000);  // two documents for three parts
  set = Load().value();
  auto few = PartitionWindows(set, 3, {.kind = DataPartition::kDocuments}, 1);
  EXPECT_NE(few.status().message().find("gets no window"), std::string::npos) << few.status();
}

}  // namespace
}  // namespace geodesic::worker
