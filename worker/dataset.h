// Datasets: Fashion-MNIST from Debian's dataset-fashion-mnist package (IDX
// files, gzip-compressed, in /usr/share/datasets/fashion-mnist), CIFAR-10's
// binary batches and safetensors files (formats.cc), and how the training
// set is split across workers.
//
// Loading checks every header field and length, so a truncated or foreign
// file is a clear DataLoss error rather than garbage pixels; a missing file
// names the Debian package to install. Torch-free: the trainer turns the
// bytes into tensors. Functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/job.h"

namespace geodesic::worker {

// Samples of shape [channels, rows, cols], channels first, as uint8 pixels
// (scaled to [0, 1] by the model's input) or float32 values (taken as they
// are); exactly one of `pixels` and `values` holds count * sample_size().
struct ImageSet {
  int64_t count = 0;
  int channels = 1;
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;  // count * sample_size(), row-major
  std::vector<float> values;    // or these, for float32 sources
  std::vector<uint8_t> labels;  // count, 0..classes-1
  int classes = 10;
  // Per-channel normalization the model's input applies, x = (p - mean) / std
  // (data.mean and data.std, or the dataset's own; set by LoadDataset).
  std::vector<float> mean, std;
  int64_t sample_size() const { return int64_t{channels} * rows * cols; }
  bool is_float() const { return !values.empty(); }
};

// Mean and std of the 60k Fashion-MNIST training pixels in [0, 1]: x = (p/255 - mean) / std.
inline constexpr float kFashionMean = 0.2860f;
inline constexpr float kFashionStd = 0.3530f;

// Split "train" or "test" of the job's dataset (data.dataset in data.path),
// with its normalization: data.mean and data.std (one value per channel), or
// Fashion-MNIST's and CIFAR-10's published values, or a safetensors file's
// __metadata__ "mean" and "std", or 0 and 1. Errors name data.path.
// max_samples > 0 keeps only the split's first max_samples samples; IDX and
// CIFAR-10 files are read only as far as those go (the evaluator's
// BatchNorm statistics want the head of the training set, not all of it).
StatusOr<ImageSet> LoadDataset(const DataSpec& data, const std::string& split, int64_t max_samples = 0);

// Drops every sample of `set` after the first n (none if it has n or fewer).
void KeepHead(int64_t n, ImageSet* set);

// The samples `indices` of `set`, in that order, with its shape, classes
// and normalization.
ImageSet Subset(const ImageSet& set, const std::vector<int64_t>& indices);

// A training set that epochs cannot be counted over: its size differs from
// job.TrainSamples() when the job counts training.epochs. Names the key.
Status CheckTrainingSet(const JobSpec& job, const ImageSet& train);

// Loads split "train" (60k) or "test" (10k) from `dir`; max_samples > 0:
// only the first max_samples, decompressed no further than they go.
StatusOr<ImageSet> LoadFashionMnist(const std::string& dir, const std::string& split, int64_t max_samples = 0);

// The CIFAR-10 binary format ("CIFAR-10 binary version"): files of records
// of one label byte (0..9) and 3 * 32 * 32 pixel bytes (red, green, blue
// planes, rows top first). Split "train" reads data_batch_1.bin ..
// data_batch_5.bin, "test" test_batch.bin, from `dir` or from
// `dir`/cifar-10-batches-bin; a train split may have fewer batch files if
// they are numbered from 1 without gaps. A file that is not whole records or
// has a label above 9 is DataLoss naming it. max_samples > 0: the files
// after the one that completes max_samples are not read.
StatusOr<ImageSet> LoadCifar10(const std::string& dir, const std::string& split, int64_t max_samples = 0);

// A safetensors file (a little-endian u64 header length, a JSON header, raw
// little-endian arrays; docs/datasets.md) holding "images" (U8 or F32, shape
// [N, D], [N, H, W] or [N, C, H, W]) and "labels" (U8, I32 or I64, shape
// [N]). `classes` is the header's __metadata__ "classes" if present, else
// the largest label + 1 (at most 256). Offsets, sizes, dtypes, shapes and
// labels are all checked; each error names the file and the tensor.
StatusOr<ImageSet> LoadSafetensors(const std::string& path);

// Reads a gzip-compressed IDX file of the given magic (0x803 images,
// 0x801 labels). max_items > 0: only the first max_items items (dims[0]
// says how many came), decompressed no further than they go, so a
// truncated tail past them goes unnoticed. Exposed for tests.
StatusOr<std::vector<uint8_t>> ReadIdxGz(const std::string& path, uint32_t magic, std::vector<uint32_t>* dims,
                                         int64_t max_items = 0);

// IID partition: a seeded permutation of [0, n) cut into `parts` slices of
// near-equal size; returns slice `part`. Every index lands in exactly one part.
std::vector<int64_t> IidPartition(int64_t n, int parts, int part, uint64_t seed);

}  // namespace geodesic::worker
