#include "worker/snapshot.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/files.h"
#include "common/log.h"

namespace geodesic::worker {
namespace {

constexpr char kMagic[8] = {'G', 'D', 'S', 'N', 'A', 'P', '0', '1'};
constexpr size_t kHeader = 8 + 8 + 8 + 8;

Status ReadHeader(std::ifstream& in, const std::string& path, SnapshotInfo* info, int64_t* count) {
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return DataLoss(path + ": not a snapshot");
  if (!in.read(reinterpret_cast<char*>(&info->step), 8) || !in.read(reinterpret_cast<char*>(&info->seconds), 8) ||
      !in.read(reinterpret_cast<char*>(count), 8))
    return DataLoss(path + ": truncated snapshot header");
  return Status::Ok();
}

}  // namespace

Status WriteSnapshot(const std::string& dir, int64_t step, double seconds, const float* values, int64_t n,
                     double age_s) {
  std::string data(kHeader + static_cast<size_t>(n) * sizeof(float), '\0');
  char* p = data.data();
  std::memcpy(p, kMagic, 8);
  std::memcpy(p + 8, &step, 8);
  std::memcpy(p + 16, &seconds, 8);
  std::memcpy(p + 24, &n, 8);
  std::memcpy(p + kHeader, values, static_cast<size_t>(n) * sizeof(float));
  char name[64];
  std::snprintf(name, sizeof(name), "/snap-%010lld.bin", static_cast<long long>(step));
  // Snapshots feed the accuracy curve, not recovery: no fsync on the training path.
  GD_RETURN_IF_ERROR(WriteFileAtomic(dir + name, data, /*durable=*/false));
  if (age_s <= 0) return Status::Ok();
  std::error_code ec;
  const auto age =
      std::chrono::duration_cast<std::filesystem::file_time_type::duration>(std::chrono::duration<double>(age_s));
  std::filesystem::last_write_time(dir + name, std::filesystem::file_time_type::clock::now() - age, ec);
  if (ec) return Internal(dir + name + ": cannot date the snapshot: " + ec.message());
  return Status::Ok();
}

std::vector<SnapshotInfo> ListSnapshots(const std::string& dir) {
  std::vector<SnapshotInfo> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string path = e.path().string();
    if (e.path().extension() != ".bin" || e.path().filename().string().rfind("snap-", 0) != 0) continue;
    std::ifstream in(path, std::ios::binary);
    SnapshotInfo info;
    info.path = path;
    int64_t count = 0;
    Status s = ReadHeader(in, path, &info, &count);
    if (!s.ok()) {
      GD_LOG(WARNING) << "skipping snapshot: " << s;
      continue;
    }
    out.push_back(info);
  }
  std::sort(out.begin(), out.end(), [](const SnapshotInfo& a, const SnapshotInfo& b) { return a.step < b.step; });
  return out;
}

Status ReadSnapshot(const std::string& path, int64_t n, std::vector<float>* values) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path);
  SnapshotInfo info;
  int64_t count = 0;
  GD_RETURN_IF_ERROR(ReadHeader(in, path, &info, &count));
  if (count != n)
    return DataLoss(path + ": holds " + std::to_string(count) + " values, model has " + std::to_string(n));
  values->resize(static_cast<size_t>(n));
  if (!in.read(reinterpret_cast<char*>(values->data()), n * static_cast<int64_t>(sizeof(float))))
    return DataLoss(path + ": truncated snapshot");
  return Status::Ok();
}

namespace {

// `points` indices of [lo, hi) spread evenly, ending with hi - 1 (hi - lo > points > 0).
std::vector<size_t> EvenPicks(size_t lo, size_t hi, size_t points) {
  std::vector<size_t> picks;
  for (size_t j = 1; j <= points; ++j) picks.push_back(lo + (j * (hi - lo) + points - 1) / points - 1);
  return picks;
}

// Scores [lo, hi) until the first snapshot that reaches the target, `add`
// returning whether one did: in order when at most `points` are left,
// otherwise `points` picks and then, where one reached, the stretch before it.
void FindFirst(size_t lo, size_t hi, size_t points, const std::function<bool(size_t)>& add) {
  if (hi - lo <= points) {
    for (size_t k = lo; k < hi && !add(k); ++k) {
    }
    return;
  }
  for (size_t i : EvenPicks(lo, hi, points)) {
    if (add(i)) return FindFirst(lo, i, points, add);
    lo = i + 1;
  }
}

}  // namespace

std::vector<std::pair<size_t, double>> ScoreCurve(size_t n, int64_t points, double target, const SnapshotScore& score) {
  std::vector<std::pair<size_t, double>> scored;
  auto add = [&](size_t i) {
    std::optional<double> a = score(i);
    if (a) scored.emplace_back(i, *a);
    return a && *a >= target;
  };
  if (points <= 0 || n <= static_cast<size_t>(points)) {
    for (size_t i = 0; i < n; ++i) add(i);
    return scored;
  }
  size_t from = 0;  // the first snapshot after the last scored one below the target
  bool reached = false;
  for (size_t i : EvenPicks(0, n, static_cast<size_t>(points))) {
    if (add(i) && !reached) {
      reached = true;
      FindFirst(from, i, static_cast<size_t>(points), add);
    }
    if (!reached) from = i + 1;
  }
  std::sort(scored.begin(), scored.end());
  return scored;
}

}  // namespace geodesic::worker
