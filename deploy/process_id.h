// Who one process of a job is: its role and its id. Its name ("coordinator",
// "server-0", "backup-0", "worker-3", "evaluator") is what names its log,
// stats, http and token files, its key in pids.json and the summary, and
// what --kill targets; code that needs the role or the id reads them here
// instead of taking the name apart. Thread-safe (a value).
#pragma once

#include <compare>
#include <optional>
#include <string>

namespace geodesic::deploy {

enum class ProcessRole { kCoordinator, kServer, kBackup, kWorker, kEvaluator, kAggregator };

struct ProcessId {
  ProcessRole role = ProcessRole::kCoordinator;
  int id = 0;  // servers, backups (their shard's) and workers: the index; aggregators: the region's; 0 otherwise

  static ProcessId Coordinator() { return {ProcessRole::kCoordinator, 0}; }
  static ProcessId Server(int i) { return {ProcessRole::kServer, i}; }
  static ProcessId Backup(int i) { return {ProcessRole::kBackup, i}; }
  static ProcessId Worker(int i) { return {ProcessRole::kWorker, i}; }
  static ProcessId Evaluator() { return {ProcessRole::kEvaluator, 0}; }
  static ProcessId Aggregator(int region) { return {ProcessRole::kAggregator, region}; }

  std::string Name() const;
  // The process a name stands for; nullopt for a name no process has
  // ("worker-x", "server-", "server-01", "shard-1").
  static std::optional<ProcessId> Parse(const std::string& name);

  bool is(ProcessRole r) const { return role == r; }
  auto operator<=>(const ProcessId&) const = default;
};

}  // namespace geodesic::deploy
