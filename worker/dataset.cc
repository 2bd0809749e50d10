#include "worker/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <random>

namespace geodesic::worker {
namespace {

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The first `limit` uncompressed bytes of `path` (all of them by default).
// A read that stops at the limit does not reach the gzip trailer, so it
// cannot tell a truncated file from a whole one; a full read does.
StatusOr<std::vector<uint8_t>> Gunzip(const std::string& path, size_t limit = SIZE_MAX) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return NotFound("cannot open " + path);
  gzbuffer(f, 1 << 20);
  std::vector<uint8_t> out;
  std::vector<uint8_t> buf(std::min<size_t>(1 << 20, limit));
  while (true) {
    if (out.size() >= limit) {
      gzclose(f);
      return out;
    }
    const size_t want = std::min(buf.size(), limit - out.size());
    int n = gzread(f, buf.data(), static_cast<unsigned>(want));
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      return DataLoss(path + ": corrupt gzip stream: " + msg);
    }
    if (n == 0) break;
    out.insert(out.end(), buf.begin(), buf.begin() + n);
    if (out.size() > (size_t{1} << 30)) {
      gzclose(f);
      return DataLoss(path + ": larger than 1 GiB uncompressed; not a Fashion-MNIST file");
    }
  }
  // gzread returns 0 both at a clean end and at a truncated stream; only
  // gzclose_r reports the missing trailer.
  int rc = gzclose(f);
  if (rc != Z_OK) return DataLoss(path + ": truncated or corrupt gzip file");
  return out;
}

// The dimensions in `raw`'s IDX header and the data bytes they promise.
StatusOr<uint64_t> ParseIdxHeader(const std::vector<uint8_t>& raw, const std::string& path, uint32_t magic,
                                  std::vector<uint32_t>* dims) {
  if (raw.size() < 8) return DataLoss(path + ": too short for an IDX header");
  uint32_t got = BigEndian32(raw.data());
  if (got != magic) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), ": IDX magic 0x%08x, expected 0x%08x", got, magic);
    return DataLoss(path + buf);
  }
  uint32_t ndims = magic & 0xff;
  if (raw.size() < 4 + 4 * size_t{ndims}) return DataLoss(path + ": truncated IDX header");
  dims->clear();
  uint64_t total = 1;
  for (uint32_t i = 0; i < ndims; ++i) {
    uint32_t d = BigEndian32(raw.data() + 4 + 4 * i);
    if (d == 0 || d > (1u << 24)) return DataLoss(path + ": implausible IDX dimension " + std::to_string(d));
    dims->push_back(d);
    total *= d;
  }
  return total;
}

}  // namespace

StatusOr<std::vector<uint8_t>> ReadIdxGz(const std::string& path, uint32_t magic, std::vector<uint32_t>* dims,
                                         int64_t max_items) {
  const size_t header = 4 + 4 * size_t{magic & 0xff};
  size_t limit = SIZE_MAX;
  uint64_t keep = 0;
  if (max_items > 0) {  // the header first, to know how many bytes the items take
    GD_ASSIGN_OR_RETURN(std::vector<uint8_t> head, Gunzip(path, header));
    GD_ASSIGN_OR_RETURN(uint64_t total, ParseIdxHeader(head, path, magic, dims));
    keep = std::min<uint64_t>((*dims)[0], static_cast<uint64_t>(max_items));
    limit = header + total / (*dims)[0] * keep;
  }
  GD_ASSIGN_OR_RETURN(std::vector<uint8_t> raw, Gunzip(path, limit));
  GD_ASSIGN_OR_RETURN(uint64_t total, ParseIdxHeader(raw, path, magic, dims));
  if (max_items > 0) {
    total = total / (*dims)[0] * keep;
    (*dims)[0] = static_cast<uint32_t>(keep);
  }
  if (raw.size() - header != total)
    return DataLoss(path + ": IDX header promises " + std::to_string(total) + " bytes of data, file has " +
                    std::to_string(raw.size() - header));
  return std::vector<uint8_t>(raw.begin() + static_cast<std::ptrdiff_t>(header), raw.end());
}

StatusOr<ImageSet> LoadFashionMnist(const std::string& dir, const std::string& split, int64_t max_samples) {
  std::string prefix;
  if (split == "train")
    prefix = "train";
  else if (split == "test")
    prefix = "t10k";
  else
    return InvalidArgument("unknown split '" + split + "' (train or test)");
  std::string images_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  std::string labels_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  for (const auto& p : {images_path, labels_path}) {
    if (!std::filesystem::exists(p))
      return NotFound("Fashion-MNIST file " + p +
                      " is missing; install it with `apt-get install dataset-fashion-mnist` "
                      "(or set data.path in the job file)");
  }
  ImageSet set;
  std::vector<uint32_t> dims;
  GD_ASSIGN_OR_RETURN(set.pixels, ReadIdxGz(images_path, 0x00000803, &dims, max_samples));
  if (dims.size() != 3) return DataLoss(images_path + ": expected 3 dimensions");
  set.count = dims[0];
  set.rows = static_cast<int>(dims[1]);
  set.cols = static_cast<int>(dims[2]);
  GD_ASSIGN_OR_RETURN(set.labels, ReadIdxGz(labels_path, 0x00000801, &dims, max_samples));
  if (dims.size() != 1 || dims[0] != set.count)
    return DataLoss(labels_path + ": " + std::to_string(dims.empty() ? 0 : dims[0]) + " labels for " +
                    std::to_string(set.count) + " images");
  for (uint8_t l : set.labels)
    if (l > 9) return DataLoss(labels_path + ": label " + std::to_string(l) + " outside 0..9");
  return set;
}

namespace {

// Published per-channel statistics of the standard training sets.
const std::vector<float> kCifarMean = {0.4914f, 0.4822f, 0.4465f};
const std::vector<float> kCifarStd = {0.2470f, 0.2435f, 0.2616f};

Status SetNormalization(const DataSpec& data, ImageSet* set) {
  const size_t channels = static_cast<size_t>(set->channels);
  if (!data.mean.empty()) {
    if (data.mean.size() != channels)
      return InvalidArgument("data.mean has " + std::to_string(data.mean.size()) + " values; " + data.path + " has " +
                             std::to_string(channels) + " channel(s)");
    set->mean.assign(data.mean.begin(), data.mean.end());
    set->std.assign(data.std.begin(), data.std.end());
  } else if (data.dataset == DatasetKind::kFashionMnist) {
    set->mean.assign(channels, kFashionMean);
    set->std.assign(channels, kFashionStd);
  } else if (data.dataset == DatasetKind::kCifar10) {
    set->mean = kCifarMean;
    set->std = kCifarStd;
  } else if (set->mean.size() != channels || set->std.size() != channels) {  // safetensors without metadata
    set->mean.assign(channels, 0.0f);
    set->std.assign(channels, 1.0f);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ImageSet> LoadDataset(const DataSpec& data, const std::string& split, int64_t max_samples) {
  StatusOr<ImageSet> set = InvalidArgument("data.dataset: unknown");
  if (data.dataset == DatasetKind::kFashionMnist)
    set = LoadFashionMnist(data.path, split, max_samples);
  else if (data.dataset == DatasetKind::kCifar10)
    set = LoadCifar10(data.path, split, max_samples);
  else if (data.dataset == DatasetKind::kSafetensors)
    set = LoadSafetensors(data.path + "/" + split + ".safetensors");
  if (!set.ok()) return set.status().Annotate("data.path");
  if (max_samples > 0) KeepHead(max_samples, &*set);
  GD_RETURN_IF_ERROR(SetNormalization(data, &*set));
  return set;
}

void KeepHead(int64_t n, ImageSet* set) {
  if (n >= set->count) return;
  const auto values = static_cast<size_t>(n * set->sample_size());
  if (set->is_float())
    set->values.resize(values);
  else
    set->pixels.resize(values);
  set->labels.resize(static_cast<size_t>(n));
  set->values.shrink_to_fit();
  set->pixels.shrink_to_fit();
  set->labels.shrink_to_fit();
  set->count = n;
}

ImageSet Subset(const ImageSet& set, const std::vector<int64_t>& indices) {
  ImageSet out;
  out.count = static_cast<int64_t>(indices.size());
  out.channels = set.channels;
  out.rows = set.rows;
  out.cols = set.cols;
  out.classes = set.classes;
  out.mean = set.mean;
  out.std = set.std;
  const auto size = static_cast<size_t>(set.sample_size());
  for (int64_t i : indices) {
    const size_t at = static_cast<size_t>(i) * size;
    if (set.is_float())
      out.values.insert(out.values.end(), set.values.begin() + at, set.values.begin() + at + size);
    else
      out.pixels.insert(out.pixels.end(), set.pixels.begin() + at, set.pixels.begin() + at + size);
    out.labels.push_back(set.labels[static_cast<size_t>(i)]);
  }
  return out;
}

Status CheckTrainingSet(const JobSpec& job, const ImageSet& train) {
  if (job.training.steps > 0 || job.federated.enabled() || job.TrainSamples() == train.count) return Status::Ok();
  return InvalidArgument("data.train_samples: the job counts training.epochs over " +
                         std::to_string(job.TrainSamples()) + " training samples, but " + job.data.path + " has " +
                         std::to_string(train.count) + "; set data.train_samples: " + std::to_string(train.count) +
                         " (or training.steps)");
}

std::vector<int64_t> IidPartition(int64_t n, int parts, int part, uint64_t seed) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  // Fisher-Yates with our own draw, so the split is the same on every libstdc++.
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(perm[i], perm[j]);
  }
  int64_t begin = n * part / parts, end = n * (part + 1) / parts;
  return std::vector<int64_t>(perm.begin() + begin, perm.begin() + end);
}

}  // namespace geodesic::worker
