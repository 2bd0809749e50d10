#include "deploy/run_dir.h"

#include <ctime>
#include <filesystem>

#include "common/files.h"

namespace geodesic::deploy {
namespace {

std::string Timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// Removes what an earlier launch into `dir` left for its own processes.
// What cannot be removed stays (never an exception): the process that
// writes it then names the failure, and the job's results say so.
void ClearPreviousRun(const RunDir& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir.wan_control(), ec);
  for (const auto& e : std::filesystem::directory_iterator(dir.snapshots(), ec)) std::filesystem::remove(e.path(), ec);
  std::filesystem::remove(dir.endpoint_file(), ec);
  std::filesystem::remove(dir.coordinator_state(), ec);  // a new run starts a new rendezvous
  std::filesystem::remove(dir.result_json(), ec);
  // Push ledgers count per process; an earlier launch's are not this one's.
  for (const auto& e : std::filesystem::directory_iterator(dir.stats_dir(), ec))
    if (e.path().extension() == ".ledger") std::filesystem::remove(e.path(), ec);
  std::filesystem::remove(dir.final_params(), ec);
  for (const auto& e : std::filesystem::directory_iterator(dir.http_dir(), ec)) std::filesystem::remove(e.path(), ec);
}

}  // namespace

Status RunDir::WritePids(const nlohmann::json& pids) const {
  return WriteFileAtomic(File("pids.json"), pids.dump(2), /*durable=*/false);
}

StatusOr<RunDir> PrepareRunDir(const JobSpec& job, const std::string& resume_dir, const std::string& requested,
                               std::optional<server::ResumePlan>* resume) {
  const bool resuming = !resume_dir.empty();
  RunDir dir{resuming ? resume_dir : requested.empty() ? "runs/" + job.name + "-" + Timestamp() : requested};
  const std::string checkpoint_dir = dir.checkpoints();
  if (resuming && job.membership.elastic)
    return FailedPrecondition(
        "--resume: resuming an elastic job (membership.elastic) is not supported yet: which "
        "data units were finished is the coordinator's state, which a resumed run starts afresh");
  if (resuming) {
    GD_ASSIGN_OR_RETURN(*resume, server::PlanResume(checkpoint_dir, job.name, job.NumServers(), job.NumWorkers(),
                                                    job.training.staleness_bound));
  } else if (std::filesystem::exists(checkpoint_dir) && !std::filesystem::is_empty(checkpoint_dir)) {
    // Never overwrite another run's checkpoints.
    return FailedPrecondition(dir.path +
                              " holds the checkpoints of an earlier run; continue it with `geodesic launch "
                              "--resume " +
                              dir.path + "` or choose another --run-dir");
  }
  for (const char* sub : {"", "/logs", "/stats", "/snapshots", "/http"}) GD_RETURN_IF_ERROR(MakeDirs(dir.path + sub));
  if (*resume) GD_RETURN_IF_ERROR(WriteFileAtomic(dir.resume_json(), (*resume)->ToJson()));
  ClearPreviousRun(dir);
  return dir;
}

StatusOr<nlohmann::json> ReadPids(const std::string& run_dir) {
  GD_ASSIGN_OR_RETURN(std::string text, ReadFile(run_dir + "/pids.json"));
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return InvalidArgument(run_dir + "/pids.json: " + e.what());
  }
}

}  // namespace geodesic::deploy
