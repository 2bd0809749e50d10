#include "worker/tokens.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "worker/dataset.h"

namespace geodesic::worker {
namespace {

namespace fs = std::filesystem;

// The whole of `path` (at most `limit` bytes of it), or NotFound naming it.
StatusOr<std::string> ReadBytes(const std::string& path, size_t limit = SIZE_MAX) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open (scripts/convert_dataset.py text writes token data)");
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return NotFound(path + ": " + ec.message());
  std::string out(static_cast<size_t>(std::min<uintmax_t>(size, limit)), '\0');
  if (!in.read(out.data(), static_cast<std::streamsize>(out.size()))) return DataLoss(path + ": read failed");
  return out;
}

// Little-endian unsigned integers of `width` bytes, as many as `raw` holds.
template <typename T>
std::vector<T> Decode(const std::string& raw, int width) {
  std::vector<T> out(raw.size() / static_cast<size_t>(width));
  const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
  for (size_t i = 0; i < out.size(); ++i, p += width) {
    uint64_t v = 0;
    for (int b = width - 1; b >= 0; --b) v = (v << 8) | p[b];
    out[i] = static_cast<T>(v);
  }
  return out;
}

StatusOr<std::vector<uint32_t>> ReadIds(const DataSpec& data, const std::string& path, int64_t max_tokens) {
  const size_t width = static_cast<size_t>(data.token_bytes);
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return NotFound(path + ": cannot open (scripts/convert_dataset.py text writes token data)");
  if (size % width != 0)
    return DataLoss(path + ": " + std::to_string(size) + " bytes is not a whole number of " + std::to_string(width) +
                    "-byte token ids (data.token_bytes)");
  const size_t limit = max_tokens > 0 ? static_cast<size_t>(max_tokens) * width : SIZE_MAX;
  GD_ASSIGN_OR_RETURN(std::string raw, ReadBytes(path, limit));
  return Decode<uint32_t>(raw, static_cast<int>(width));
}

// The .docs and .groups side files of `bin`, when present.
Status ReadDocuments(const std::string& bin, TokenSet* set) {
  const std::string stem = bin.substr(0, bin.size() - 4), docs = stem + ".docs", groups = stem + ".groups";
  if (!fs::exists(docs)) return Status::Ok();
  GD_ASSIGN_OR_RETURN(std::string raw, ReadBytes(docs));
  if (raw.size() % 8 != 0) return DataLoss(docs + ": not a whole number of uint64 offsets");
  set->doc_starts = Decode<uint64_t>(raw, 8);
  const auto& s = set->doc_starts;
  if (s.empty() || s[0] != 0) return DataLoss(docs + ": the first document must start at offset 0");
  for (size_t i = 1; i < s.size(); ++i)
    if (s[i] <= s[i - 1] || s[i] >= set->tokens.size())
      return DataLoss(docs + ": offset " + std::to_string(i) + " (" + std::to_string(s[i]) +
                      ") is not increasing within the " + std::to_string(set->tokens.size()) + " tokens");
  if (!fs::exists(groups)) return Status::Ok();
  GD_ASSIGN_OR_RETURN(raw, ReadBytes(groups));
  if (raw.size() != 4 * s.size())
    return DataLoss(groups + ": " + std::to_string(raw.size() / 4) + " groups for " + std::to_string(s.size()) +
                    " documents");
  set->doc_groups = Decode<uint32_t>(raw, 4);
  return Status::Ok();
}

// Deals `units` (documents or groups, with their token counts) to the
// parts in a seeded order, each to the part with the fewest tokens so far.
std::vector<int> Deal(const std::vector<int64_t>& sizes, int parts, uint64_t seed) {
  std::vector<int64_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  for (int64_t i = static_cast<int64_t>(order.size()) - 1; i > 0; --i)
    std::swap(order[i], order[static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1))]);
  std::vector<int64_t> load(parts, 0);
  std::vector<int> owner(sizes.size(), 0);
  for (int64_t u : order) {
    int p = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[u] = p;
    load[p] += sizes[u];
  }
  return owner;
}

}  // namespace

int64_t TokenSet::DocumentOf(int64_t window) const {
  if (doc_starts.empty()) return 0;
  const uint64_t at = static_cast<uint64_t>(window) * static_cast<uint64_t>(context);
  return std::upper_bound(doc_starts.begin(), doc_starts.end(), at) - doc_starts.begin() - 1;
}

std::string TokenFile(const DataSpec& data, const std::string& split) {
  return (fs::path(data.path) / (split == "train" ? "train.bin" : "val.bin")).string();
}

StatusOr<TokenSet> LoadTokens(const DataSpec& data, const std::string& split, int64_t max_windows) {
  TokenSet set;
  set.context = data.context;
  set.file = TokenFile(data, split);
  const int64_t max_tokens = max_windows > 0 ? max_windows * data.context + 1 : 0;
  GD_ASSIGN_OR_RETURN(set.tokens, ReadIds(data, set.file, max_tokens));
  if (set.tokens.size() < static_cast<size_t>(data.context) + 1)
    return DataLoss(set.file + ": " + std::to_string(set.tokens.size()) + " tokens, fewer than one window of " +
                    std::to_string(data.context) + " + 1 (data.context)");
  set.max_token = *std::max_element(set.tokens.begin(), set.tokens.end());
  if (data.vocab > 0 && set.max_token >= data.vocab)
    return DataLoss(set.file + ": token id " + std::to_string(set.max_token) + " is at or above data.vocab " +
                    std::to_string(data.vocab));
  if (max_windows > 0) return set;  // a head: documents are for partitions of whole splits
  GD_RETURN_IF_ERROR(ReadDocuments(set.file, &set));
  return set;
}

Status CheckTokenEpochs(const JobSpec& job, const TokenSet& train) {
  if (job.training.steps == 0 && job.TrainSamples() != train.windows())
    return InvalidArgument("data.train_samples: the job counts training.epochs over " +
                           std::to_string(job.TrainSamples()) + " windows, but " + train.file + " has " +
                           std::to_string(train.windows()) + " of data.context " + std::to_string(job.data.context) +
                           " tokens; set data.train_samples: " + std::to_string(train.windows()) +
                           " (or training.steps)");
  return Status::Ok();
}

StatusOr<std::vector<std::vector<int64_t>>> PartitionWindows(const TokenSet& set, int parts, const PartitionSpec& spec,
                                                             uint64_t seed, int64_t min_windows) {
  const int64_t n = set.windows();
  std::vector<std::vector<int64_t>> out(parts);
  if (spec.kind == DataPartition::kIid) {
    const std::vector<int64_t> perm = IidPartition(n, 1, 0, seed);  // as IidPartition cuts it, computed once
    for (int p = 0; p < parts; ++p) out[p].assign(perm.begin() + n * p / parts, perm.begin() + n * (p + 1) / parts);
  } else {
    const bool groups = spec.kind == DataPartition::kGroups;
    const std::string side = set.file.substr(0, set.file.size() - 4) + (groups ? ".groups" : ".docs");
    if (set.doc_starts.empty() || (groups && set.doc_groups.empty()))
      return InvalidArgument("data.partition " + ToString(spec) + " needs " + side);
    // Tokens per unit (document or group), then each window to its unit's part.
    const size_t docs = set.doc_starts.size();
    std::vector<int64_t> unit_of(docs), sizes;
    for (size_t d = 0; d < docs; ++d) {
      unit_of[d] = groups ? set.doc_groups[d] : static_cast<int64_t>(d);
      if (static_cast<size_t>(unit_of[d]) >= sizes.size()) sizes.resize(unit_of[d] + 1, 0);
      const uint64_t end = d + 1 < docs ? set.doc_starts[d + 1] : set.tokens.size();
      sizes[unit_of[d]] += static_cast<int64_t>(end - set.doc_starts[d]);
    }
    const std::vector<int> owner = Deal(sizes, parts, seed);
    for (int64_t w = 0; w < n; ++w) out[owner[unit_of[set.DocumentOf(w)]]].push_back(w);
  }
  for (int p = 0; p < parts; ++p)
    if (static_cast<int64_t>(out[p].size()) < std::max<int64_t>(1, min_windows))
      return InvalidArgument("data.partition " + ToString(spec) + ": part " + std::to_string(p) + " of " +
                             std::to_string(parts) + " gets " +
                             (out[p].empty() ? "no window" : std::to_string(out[p].size()) + " windows") + " of " +
                             set.file + (min_windows > 1 ? ", fewer than " + std::to_string(min_windows) : ""));
  return out;
}

}  // namespace geodesic::worker
