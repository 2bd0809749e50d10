// Dataset formats besides Fashion-MNIST's IDX files: CIFAR-10's binary
// batches and safetensors. Torch-free; every length is checked before it
// is used.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "worker/dataset.h"

namespace geodesic::worker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

static_assert(std::endian::native == std::endian::little, "safetensors and CIFAR-10 are read in place");

constexpr int64_t kCifarPixels = 3 * 32 * 32;
constexpr int64_t kCifarRecord = 1 + kCifarPixels;
// Appends the records of one CIFAR-10 batch file to `set`.
Status AppendCifarFile(const std::string& path, ImageSet* set) {
  GD_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(path));
  const int64_t n = static_cast<int64_t>(bytes.size()) / kCifarRecord;
  if (bytes.empty() || static_cast<int64_t>(bytes.size()) % kCifarRecord != 0)
    return DataLoss(path + ": " + std::to_string(bytes.size()) + " bytes is not a whole number of CIFAR-10 records (" +
                    std::to_string(kCifarRecord) + " bytes each)");
  for (int64_t i = 0; i < n; ++i) {
    const auto* r = reinterpret_cast<const uint8_t*>(bytes.data()) + i * kCifarRecord;
    if (r[0] > 9)
      return DataLoss(path + ": record " + std::to_string(i) + " has label " + std::to_string(r[0]) + " outside 0..9");
    set->labels.push_back(r[0]);
    set->pixels.insert(set->pixels.end(), r + 1, r + kCifarRecord);
  }
  set->count += n;
  return Status::Ok();
}

std::vector<std::string> CifarFiles(const std::string& dir, const std::string& split) {
  std::vector<std::string> files;
  if (split == "test") {
    files.push_back(dir + "/test_batch.bin");
    return files;
  }
  for (int b = 1; b <= 5; ++b) {
    std::string f = dir + "/data_batch_" + std::to_string(b) + ".bin";
    if (b > 1 && !fs::exists(f)) break;
    files.push_back(f);
  }
  return files;
}

uint64_t Le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

int64_t DtypeBytes(const std::string& dtype) {
  if (dtype == "U8") return 1;
  if (dtype == "I32" || dtype == "F32") return 4;
  if (dtype == "I64") return 8;
  return 0;
}

// One tensor of a safetensors file: its dtype, shape and bytes.
struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  int64_t bytes = 0;
};

StatusOr<RawTensor> FindTensor(const json& header, const std::string& name, const std::string& file,
                               uint64_t data_start, const std::string& where) {
  const std::string at = where + ": tensor '" + name + "'";
  if (!header.contains(name)) return InvalidArgument(at + " is missing (the file needs 'images' and 'labels')");
  const json& t = header[name];
  if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets") ||
      !t["dtype"].is_string() || !t["shape"].is_array() || !t["data_offsets"].is_array() ||
      t["data_offsets"].size() != 2)
    return DataLoss(at + ": needs dtype, shape and data_offsets [begin, end]");
  RawTensor r;
  r.dtype = t["dtype"].get<std::string>();
  if (DtypeBytes(r.dtype) == 0) return InvalidArgument(at + ": dtype " + r.dtype + " (use U8, I32, I64 or F32)");
  int64_t elements = 1;
  for (const json& d : t["shape"]) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 32))
      return DataLoss(at + ": shape " + t["shape"].dump() + " is not a list of sizes");
    r.shape.push_back(d.get<int64_t>());
    elements = r.shape.back() == 0 ? 0 : elements * r.shape.back();
    if (elements > int64_t{1} << 40) return DataLoss(at + ": shape " + t["shape"].dump() + " is implausibly large");
  }
  for (const json& o : t["data_offsets"])
    if (!o.is_number_unsigned()) return DataLoss(at + ": data_offsets must be byte offsets");
  const uint64_t begin = t["data_offsets"][0].get<uint64_t>(), end = t["data_offsets"][1].get<uint64_t>();
  if (begin > end || end > file.size() - data_start)
    return DataLoss(at + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                    "] outside the file's " + std::to_string(file.size() - data_start) + " data bytes");
  if (static_cast<uint64_t>(elements * DtypeBytes(r.dtype)) != end - begin)
    return DataLoss(at + ": shape " + t["shape"].dump() + " of " + r.dtype + " needs " +
                    std::to_string(elements * DtypeBytes(r.dtype)) + " bytes, data_offsets give " +
                    std::to_string(end - begin));
  r.data = reinterpret_cast<const uint8_t*>(file.data()) + data_start + begin;
  r.bytes = static_cast<int64_t>(end - begin);
  return r;
}

Status TakeImages(const RawTensor& t, const std::string& where, ImageSet* set) {
  const std::string at = where + ": tensor 'images'";
  if (t.dtype != "U8" && t.dtype != "F32") return InvalidArgument(at + ": dtype " + t.dtype + " (use U8 or F32)");
  const size_t rank = t.shape.size();
  if (rank < 2 || rank > 4)
    return InvalidArgument(at + ": rank " + std::to_string(rank) + "; use [N, D], [N, H, W] or [N, C, H, W]");
  set->count = t.shape[0];
  set->channels = rank == 4 ? static_cast<int>(t.shape[1]) : 1;
  set->rows = rank == 2 ? 1 : static_cast<int>(t.shape[rank - 2]);
  set->cols = static_cast<int>(t.shape[rank - 1]);
  if (set->count == 0 || set->sample_size() == 0) return InvalidArgument(at + ": has no samples");
  if (t.dtype == "U8") {
    set->pixels.assign(t.data, t.data + t.bytes);
    return Status::Ok();
  }
  set->values.resize(static_cast<size_t>(t.bytes / 4));
  std::memcpy(set->values.data(), t.data, static_cast<size_t>(t.bytes));  // little-endian host
  for (float v : set->values)
    if (!std::isfinite(v)) return DataLoss(at + ": holds a value that is not finite");
  return Status::Ok();
}

Status TakeLabels(const RawTensor& t, const json& meta, const std::string& where, ImageSet* set) {
  const std::string at = where + ": tensor 'labels'";
  if (t.dtype == "F32") return InvalidArgument(at + ": dtype F32 (use U8, I32 or I64)");
  if (t.shape.size() != 1 || t.shape[0] != set->count)
    return InvalidArgument(at + ": shape must be [" + std::to_string(set->count) + "], one per image");
  const int64_t width = DtypeBytes(t.dtype);
  int64_t top = meta.is_object() && meta.contains("classes") && meta["classes"].is_string()
                    ? std::atoll(meta["classes"].get<std::string>().c_str())
                    : -1;
  if (meta.is_object() && meta.contains("classes") && (top < 2 || top > 256))
    return InvalidArgument(where + ": __metadata__ classes must be a number in 2..256");
  int64_t largest = 0;
  set->labels.resize(static_cast<size_t>(set->count));
  for (int64_t i = 0; i < set->count; ++i) {
    int64_t v = 0;
    std::memcpy(&v, t.data + i * width, static_cast<size_t>(width));
    if (width == 4) v = static_cast<int32_t>(v);
    if (v < 0 || v > 255 || (top > 0 && v >= top))
      return InvalidArgument(at + ": label " + std::to_string(v) + " of sample " + std::to_string(i) + " outside 0.." +
                             std::to_string(top > 0 ? top - 1 : 255));
    largest = std::max(largest, v);
    set->labels[static_cast<size_t>(i)] = static_cast<uint8_t>(v);
  }
  set->classes = static_cast<int>(top > 0 ? top : std::max<int64_t>(largest + 1, 2));
  return Status::Ok();
}

// __metadata__ "mean" and "std": comma-separated per-channel values.
Status TakeNormalization(const json& meta, const std::string& where, ImageSet* set) {
  if (!meta.is_object()) return Status::Ok();
  for (const char* key : {"mean", "std"}) {
    if (!meta.contains(key)) continue;
    std::vector<float>& out = std::string(key) == "mean" ? set->mean : set->std;
    std::string text = meta[key].is_string() ? meta[key].get<std::string>() : "";
    for (size_t pos = 0; pos <= text.size();) {
      size_t comma = std::min(text.find(',', pos), text.size());
      char* end = nullptr;
      const std::string item = text.substr(pos, comma - pos);
      const float v = std::strtof(item.c_str(), &end);
      if (item.empty() || *end != '\0' || !std::isfinite(v) || (key[0] == 's' && v <= 0))
        return InvalidArgument(where + ": __metadata__ " + key + " '" + text +
                               "' is not a comma-separated list of numbers" + (key[0] == 's' ? " > 0" : ""));
      out.push_back(v);
      pos = comma + 1;
    }
    if (out.size() != static_cast<size_t>(set->channels))
      return InvalidArgument(where + ": __metadata__ " + key + " has " + std::to_string(out.size()) + " values for " +
                             std::to_string(set->channels) + " channel(s)");
  }
  if (set->mean.empty() != set->std.empty())
    return InvalidArgument(where + ": __metadata__ needs both mean and std, or neither");
  return Status::Ok();
}

}  // namespace

StatusOr<ImageSet> LoadCifar10(const std::string& dir, const std::string& split, int64_t max_samples) {
  if (split != "train" && split != "test") return InvalidArgument("unknown split '" + split + "' (train or test)");
  std::string base = dir;
  if (!fs::exists(base + "/test_batch.bin") && fs::exists(base + "/cifar-10-batches-bin"))
    base += "/cifar-10-batches-bin";
  ImageSet set;
  set.channels = 3;
  set.rows = set.cols = 32;
  for (const std::string& f : CifarFiles(base, split)) {
    if (!fs::is_regular_file(f))
      return NotFound("CIFAR-10 file " + f + " is missing (data.path names the directory of the binary version's " +
                      "data_batch_N.bin and test_batch.bin)");
    GD_RETURN_IF_ERROR(AppendCifarFile(f, &set));
    if (max_samples > 0 && set.count >= max_samples) break;
  }
  return set;
}

StatusOr<ImageSet> LoadSafetensors(const std::string& path) {
  if (!fs::is_regular_file(path)) return NotFound("safetensors file " + path + " is missing");
  GD_ASSIGN_OR_RETURN(const std::string file, ReadFile(path));
  if (file.size() < 8) return DataLoss(path + ": too short for a safetensors header");
  const uint64_t header_bytes = Le64(reinterpret_cast<const uint8_t*>(file.data()));
  if (header_bytes < 2 || header_bytes > file.size() - 8 || header_bytes > (uint64_t{100} << 20))
    return DataLoss(path + ": header length " + std::to_string(header_bytes) + " does not fit the file's " +
                    std::to_string(file.size()) + " bytes; not a safetensors file");
  json header = json::parse(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(header_bytes), nullptr,
                            /*allow_exceptions=*/false);
  if (!header.is_object()) return DataLoss(path + ": the header is not a JSON object; not a safetensors file");
  const uint64_t data_start = 8 + header_bytes;
  ImageSet set;
  GD_ASSIGN_OR_RETURN(RawTensor images, FindTensor(header, "images", file, data_start, path));
  GD_RETURN_IF_ERROR(TakeImages(images, path, &set));
  GD_ASSIGN_OR_RETURN(RawTensor labels, FindTensor(header, "labels", file, data_start, path));
  const json meta = header.value("__metadata__", json());
  GD_RETURN_IF_ERROR(TakeLabels(labels, meta, path, &set));
  GD_RETURN_IF_ERROR(TakeNormalization(meta, path, &set));
  return set;
}

}  // namespace geodesic::worker
