#include "worker/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>

namespace geodesic::worker {
namespace {

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

StatusOr<std::vector<uint8_t>> Gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return NotFound("cannot open " + path);
  gzbuffer(f, 1 << 20);
  std::vector<uint8_t> out;
  std::vector<uint8_t> buf(1 << 20);
  while (true) {
    int n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
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

}  // namespace

StatusOr<std::vector<uint8_t>> ReadIdxGz(const std::string& path, uint32_t magic, std::vector<uint32_t>* dims) {
  GD_ASSIGN_OR_RETURN(std::vector<uint8_t> raw, Gunzip(path));
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
  size_t header = 4 + 4 * size_t{ndims};
  if (raw.size() - header != total)
    return DataLoss(path + ": IDX header promises " + std::to_string(total) + " bytes of data, file has " +
                    std::to_string(raw.size() - header));
  return std::vector<uint8_t>(raw.begin() + static_cast<std::ptrdiff_t>(header), raw.end());
}

StatusOr<ImageSet> LoadFashionMnist(const std::string& dir, const std::string& split) {
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
  GD_ASSIGN_OR_RETURN(set.pixels, ReadIdxGz(images_path, 0x00000803, &dims));
  if (dims.size() != 3) return DataLoss(images_path + ": expected 3 dimensions");
  set.count = dims[0];
  set.rows = static_cast<int>(dims[1]);
  set.cols = static_cast<int>(dims[2]);
  GD_ASSIGN_OR_RETURN(set.labels, ReadIdxGz(labels_path, 0x00000801, &dims));
  if (dims.size() != 1 || dims[0] != set.count)
    return DataLoss(labels_path + ": " + std::to_string(dims.empty() ? 0 : dims[0]) + " labels for " +
                    std::to_string(set.count) + " images");
  for (uint8_t l : set.labels)
    if (l > 9) return DataLoss(labels_path + ": label " + std::to_string(l) + " outside 0..9");
  return set;
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
