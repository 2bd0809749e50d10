// Shard checkpoints on disk, and the choice of what to resume from.
//
// A checkpoint is one file per shard and clock,
// <dir>/server-<id>/ckpt-<clock>.bin: the magic "GEODESIC-CKPT-1\n", a
// little-endian uint64 length, a serialized wire::ShardCheckpoint
// (proto/checkpoint.proto), and the SHA-256 digest (OpenSSL) of all that.
// It is written to a temporary file, fsynced, renamed into place, and the
// directory fsynced, so a crash at any moment leaves the previous files
// whole. A file whose magic, length or digest is wrong is refused whole
// with the reason; the resume planner then falls back to an older one.
//
// Thread-safe (no shared state); the files of one shard are written by
// that shard's loop thread only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "proto/checkpoint.pb.h"

namespace geodesic::server {

std::string EncodeCheckpoint(const wire::ShardCheckpoint& ckpt);
// `name` (a path) only labels errors.
StatusOr<wire::ShardCheckpoint> DecodeCheckpoint(std::string_view bytes, const std::string& name);
StatusOr<wire::ShardCheckpoint> LoadCheckpoint(const std::string& path);

std::string CheckpointPath(const std::string& dir, int shard, int64_t clock);

// Writes `ckpt` durably under `dir`, then deletes this shard's files beyond
// the newest `keep` (by clock). Returns the path written.
StatusOr<std::string> WriteCheckpoint(const std::string& dir, const wire::ShardCheckpoint& ckpt, int keep);

struct CheckpointFile {
  std::string path;
  int64_t clock = 0;
};
// A shard's checkpoint files, newest clock first (names only; not read).
std::vector<CheckpointFile> ListCheckpoints(const std::string& dir, int shard);

// The newest checkpoint of `shard` under `dir` that loads and belongs to
// `job`; files passed over are added to `refused` ("path: reason").
StatusOr<std::pair<std::string, wire::ShardCheckpoint>> NewestValidCheckpoint(const std::string& dir,
                                                                              const std::string& job, int shard,
                                                                              std::vector<std::string>* refused);

// What a resumed job loads: one checkpoint file per shard, and the clock
// each worker starts at.
struct ResumePlan {
  std::vector<std::string> files;      // per shard id
  std::vector<int64_t> clocks;         // the chosen file's clock, per shard
  std::vector<int64_t> worker_clocks;  // start clock per worker id
  std::vector<std::string> refused;    // "path: reason" of files passed over
  int64_t clock = 0;                   // BSP: the common clock; async: the lowest shard clock

  std::string ToJson() const;
  static StatusOr<ResumePlan> FromJson(const std::string& text, const std::string& name);
};

// Chooses checkpoints under `dir` for a job `job` with these many servers
// and workers. BSP (staleness bound 0): the newest clock for which every
// shard has a valid checkpoint, and every worker starts there, so the
// resumed run equals an uninterrupted one bit for bit. Asynchronous: each
// shard's newest valid checkpoint; a worker starts after the newest clock
// that every chunk has taken from it (its resent pushes of later clocks are
// answered as duplicates), and no earlier than the slowest shard's clock.
// Every file is read and its digest checked; bad ones go to `refused`.
StatusOr<ResumePlan> PlanResume(const std::string& dir, const std::string& job, int num_servers, int num_workers,
                                int64_t staleness_bound);

}  // namespace geodesic::server
