#include "server/checkpoint.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/format.h"
#include "common/log.h"
#include "common/wire_limits.h"

namespace geodesic::server {
namespace {

constexpr std::string_view kMagic = "GEODESIC-CKPT-1\n";
constexpr size_t kDigestBytes = 32;
constexpr size_t kHeaderBytes = 16 + 8;
static_assert(kMagic.size() == 16);

std::string Sha256(std::string_view bytes) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  GD_CHECK(EVP_Digest(bytes.data(), bytes.size(), out, &len, EVP_sha256(), nullptr) == 1 && len == kDigestBytes)
      << "SHA-256 failed";
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string ShardDir(const std::string& dir, int shard) { return dir + "/server-" + std::to_string(shard); }

}  // namespace

std::string EncodeCheckpoint(const wire::ShardCheckpoint& ckpt) {
  std::string body = ckpt.SerializeAsString();
  std::string out(kMagic);
  uint64_t len = body.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  out += body;
  out += Sha256(out);
  return out;
}

StatusOr<wire::ShardCheckpoint> DecodeCheckpoint(std::string_view bytes, const std::string& name) {
  if (bytes.size() < kHeaderBytes + kDigestBytes)
    return DataLoss(name + ": truncated checkpoint (" + std::to_string(bytes.size()) + " bytes)");
  if (bytes.substr(0, kMagic.size()) != kMagic) return DataLoss(name + ": not a Geodesic checkpoint (bad magic)");
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= uint64_t{static_cast<unsigned char>(bytes[kMagic.size() + i])} << (8 * i);
  if (len != bytes.size() - kHeaderBytes - kDigestBytes)
    return DataLoss(name + ": truncated checkpoint (header says " + std::to_string(len) + " bytes of state, file has " +
                    std::to_string(bytes.size() - kHeaderBytes - kDigestBytes) + ")");
  std::string_view signed_part = bytes.substr(0, bytes.size() - kDigestBytes);
  if (Sha256(signed_part) != bytes.substr(bytes.size() - kDigestBytes))
    return DataLoss(name + ": checkpoint digest mismatch (the file is corrupt)");
  wire::ShardCheckpoint ckpt;
  if (!ckpt.ParseFromArray(bytes.data() + kHeaderBytes, static_cast<int>(len)))
    return DataLoss(name + ": checkpoint state does not parse");
  return ckpt;
}

namespace {

// DataLoss naming `name` and the chunk unless every parameter of `ckpt` is
// finite and within kMaxValueMagnitude (what a push may hold, so what no
// honest run reaches) and every optimizer value is finite, with the sizes
// the chunk declares. A digest proves only that the file is whole: whoever
// can write the run directory can recompute it over poisoned values.
Status CheckValues(const wire::ShardCheckpoint& ckpt, const std::string& name) {
  for (const auto& c : ckpt.chunks()) {
    const std::string where = name + ": chunk " + std::to_string(c.chunk_id());
    if (c.params().size() != c.num_elems() * sizeof(float))
      return DataLoss(where + " holds " + std::to_string(c.params().size()) + " bytes of values for " +
                      std::to_string(c.num_elems()) + " values");
    std::vector<float> v(c.num_elems());
    std::memcpy(v.data(), c.params().data(), c.params().size());
    for (size_t i = 0; i < v.size(); ++i)
      if (!(std::fabs(v[i]) <= kMaxValueMagnitude))
        return DataLoss(where + ": value " + std::to_string(i) + " is " + Fmt("%g", v[i]) +
                        " (not finite or beyond +-1e18): the checkpoint is poisoned");
    for (const std::string& a : c.optimizer_arrays()) {
      if (a.size() % sizeof(float) != 0)
        return DataLoss(where + ": optimizer state of " + std::to_string(a.size()) + " bytes");
      v.resize(a.size() / sizeof(float));
      std::memcpy(v.data(), a.data(), a.size());
      for (float x : v)
        if (!std::isfinite(x)) return DataLoss(where + ": optimizer state holds non-finite values");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<wire::ShardCheckpoint> LoadCheckpoint(const std::string& path) {
  // Protobuf caps the state at 2 GiB (proto/checkpoint.proto); a larger
  // file, or something that is not a file (a FIFO, /dev/zero behind a
  // symlink), is refused before it is read.
  GD_ASSIGN_OR_RETURN(std::string bytes, ReadRegularFile(path, kHeaderBytes + (uint64_t{2} << 30) + kDigestBytes));
  GD_ASSIGN_OR_RETURN(wire::ShardCheckpoint ckpt, DecodeCheckpoint(bytes, path));
  GD_RETURN_IF_ERROR(CheckValues(ckpt, path));
  return ckpt;
}

std::string CheckpointPath(const std::string& dir, int shard, int64_t clock) {
  char name[40];
  std::snprintf(name, sizeof name, "/ckpt-%012lld.bin", static_cast<long long>(clock));
  return ShardDir(dir, shard) + name;
}

std::vector<CheckpointFile> ListCheckpoints(const std::string& dir, int shard) {
  std::vector<CheckpointFile> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(ShardDir(dir, shard), ec)) {
    const std::string name = e.path().filename().string();
    long long clock = 0;
    char tail = 0;
    // ckpt-<digits>.bin exactly; temporary files and strays are ignored.
    if (name.size() != 21 || std::sscanf(name.c_str(), "ckpt-%12lld.bi%c", &clock, &tail) != 2 || tail != 'n') continue;
    out.push_back({e.path().string(), clock});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.clock > b.clock; });
  return out;
}

StatusOr<std::string> WriteCheckpoint(const std::string& dir, const wire::ShardCheckpoint& ckpt, int keep) {
  GD_RETURN_IF_ERROR(MakeDirs(ShardDir(dir, ckpt.shard_id())));
  std::string path = CheckpointPath(dir, ckpt.shard_id(), ckpt.clock());
  GD_RETURN_IF_ERROR(WriteFileAtomic(path, EncodeCheckpoint(ckpt), /*durable=*/true));
  std::vector<CheckpointFile> all = ListCheckpoints(dir, ckpt.shard_id());
  for (size_t i = std::max(keep, 1); i < all.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(all[i].path, ec);
  }
  return path;
}

std::string ResumePlan::ToJson() const {
  nlohmann::json j;
  j["files"] = files;
  j["shard_clocks"] = clocks;
  j["worker_clocks"] = worker_clocks;
  j["refused"] = refused;
  j["clock"] = clock;
  return j.dump(2);
}

StatusOr<ResumePlan> ResumePlan::FromJson(const std::string& text, const std::string& name) {
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    ResumePlan p;
    p.files = j.at("files").get<std::vector<std::string>>();
    p.clocks = j.at("shard_clocks").get<std::vector<int64_t>>();
    p.worker_clocks = j.at("worker_clocks").get<std::vector<int64_t>>();
    p.refused = j.value("refused", std::vector<std::string>{});
    p.clock = j.at("clock").get<int64_t>();
    return p;
  } catch (const std::exception& e) {
    return InvalidArgument(name + ": not a resume plan: " + e.what());
  }
}

namespace {

// Loads `f` and checks it belongs to `job` and says what its name says.
StatusOr<wire::ShardCheckpoint> LoadListed(const CheckpointFile& f, const std::string& job, int shard) {
  auto ck = LoadCheckpoint(f.path);
  if (ck.ok() && ck->job() != job)
    return FailedPrecondition(f.path + ": checkpoint of job '" + ck->job() + "', not '" + job + "'");
  if (ck.ok() && (ck->shard_id() != shard || ck->clock() != f.clock))
    return DataLoss(f.path + ": holds shard " + std::to_string(ck->shard_id()) + " at clock " +
                    std::to_string(ck->clock()) + ", not what its name says");
  return ck;
}

}  // namespace

StatusOr<std::pair<std::string, wire::ShardCheckpoint>> NewestValidCheckpoint(const std::string& dir,
                                                                              const std::string& job, int shard,
                                                                              std::vector<std::string>* refused) {
  for (const CheckpointFile& f : ListCheckpoints(dir, shard)) {
    auto ck = LoadListed(f, job, shard);
    if (ck.ok()) return std::make_pair(f.path, std::move(*ck));
    GD_LOG(WARNING) << "passing over " << ck.status();
    refused->push_back(ck.status().message());
  }
  return NotFound("no usable checkpoint of server " + std::to_string(shard) + " under " + dir +
                  (refused->empty() ? std::string() : " (refused: " + refused->back() + ")"));
}

StatusOr<ResumePlan> PlanResume(const std::string& dir, const std::string& job, int num_servers, int num_workers,
                                int64_t staleness_bound) {
  ResumePlan plan;
  // Valid checkpoints per shard, newest first.
  std::vector<std::vector<std::pair<CheckpointFile, wire::ShardCheckpoint>>> valid(num_servers);
  for (int s = 0; s < num_servers; ++s) {
    for (const CheckpointFile& f : ListCheckpoints(dir, s)) {
      auto ck = LoadListed(f, job, s);
      if (!ck.ok()) {
        plan.refused.push_back(ck.status().message());
        GD_LOG(WARNING) << "passing over " << ck.status();
        continue;
      }
      valid[s].emplace_back(f, std::move(*ck));
    }
    if (valid[s].empty())
      return NotFound("no usable checkpoint of server " + std::to_string(s) + " under " + dir +
                      (plan.refused.empty() ? std::string() : " (refused: " + plan.refused.back() + ")"));
  }
  std::vector<const wire::ShardCheckpoint*> chosen(num_servers);
  plan.files.resize(num_servers);
  plan.clocks.resize(num_servers);
  if (staleness_bound == 0) {
    // The newest clock every shard has.
    int64_t common = -1;
    for (const auto& candidate : valid[0]) {
      const int64_t clock = candidate.first.clock;
      bool everywhere = true;
      for (int s = 1; s < num_servers && everywhere; ++s)
        everywhere =
            std::any_of(valid[s].begin(), valid[s].end(), [clock](const auto& v) { return v.first.clock == clock; });
      if (everywhere) {
        common = clock;
        break;
      }
    }
    if (common < 0)
      return NotFound("the shards' checkpoints under " + dir +
                      " share no clock, and a BSP job resumes only from one they all reached");
    for (int s = 0; s < num_servers; ++s)
      for (const auto& [f, ck] : valid[s])
        if (f.clock == common) {
          plan.files[s] = f.path;
          plan.clocks[s] = f.clock;
          chosen[s] = &ck;
        }
    plan.clock = common;
    plan.worker_clocks.assign(num_workers, common);
    return plan;
  }
  plan.clock = std::numeric_limits<int64_t>::max();
  for (int s = 0; s < num_servers; ++s) {
    plan.files[s] = valid[s].front().first.path;
    plan.clocks[s] = valid[s].front().first.clock;
    chosen[s] = &valid[s].front().second;
    plan.clock = std::min(plan.clock, plan.clocks[s]);
  }
  plan.worker_clocks.assign(num_workers, std::numeric_limits<int64_t>::max());
  for (const auto* ck : chosen)
    for (const auto& c : ck->chunks())
      for (int w = 0; w < num_workers; ++w) {
        int64_t last = w < c.last_clock_size() ? c.last_clock(w) : -1;
        plan.worker_clocks[w] = std::min(plan.worker_clocks[w], last + 1);
      }
  for (auto& c : plan.worker_clocks) c = std::max(c == std::numeric_limits<int64_t>::max() ? 0 : c, plan.clock);
  return plan;
}

}  // namespace geodesic::server
