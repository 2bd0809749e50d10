#include "deploy/control.h"

#include <google/protobuf/util/json_util.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "cluster/status_probe.h"
#include "common/files.h"
#include "config/job.h"
#include "deploy/process_id.h"
#include "deploy/run_dir.h"
#include "transport/security.h"

namespace geodesic::deploy {

using json = nlohmann::json;

Status ControlLink(const std::string& run_dir, const std::string& action, const std::string& a, const std::string& b) {
  if (action != "cut" && action != "heal") return InvalidArgument("action must be cut or heal, not '" + action + "'");
  const RunDir dir{run_dir};
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(dir.job_yaml()));
  if (job.wan.emulation != WanEmulation::kProxy && job.wan.emulation != WanEmulation::kNetns)
    return FailedPrecondition("the job in " + run_dir + " has no emulated links");
  if (!job.Link(a, b) && !job.Link(b, a)) return InvalidArgument("no link is declared between " + a + " and " + b);
  GD_RETURN_IF_ERROR(MakeDirs(dir.wan_control()));
  // One file per request, named so that the launcher applies them in order.
  auto now = std::chrono::system_clock::now().time_since_epoch().count();
  return WriteFileAtomic(dir.wan_control() + "/" + std::to_string(now) + "-" + std::to_string(::getpid()),
                         action + " " + a + " " + b + "\n", /*durable=*/false);
}

StatusOr<int> RequestCheckpoint(const std::string& run_dir) {
  GD_ASSIGN_OR_RETURN(json pids, ReadPids(run_dir));
  int asked = 0;
  for (auto& [name, pid] : pids.items()) {
    const auto who = ProcessId::Parse(name);
    if (who && who->is(ProcessRole::kServer) && pid.is_number_integer() && ::kill(pid.get<pid_t>(), SIGUSR1) == 0)
      ++asked;
  }
  if (asked == 0) return NotFound("no running server of the job in " + run_dir);
  return asked;
}

Status RequestReplan(const std::string& run_dir) {
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(RunDir{run_dir}.job_yaml()));
  if (!job.wan.replan) return FailedPrecondition("the job in " + run_dir + " does not re-plan (wan.replan: false)");
  GD_ASSIGN_OR_RETURN(json pids, ReadPids(run_dir));
  const std::string coordinator = ProcessId::Coordinator().Name();
  if (!pids.contains(coordinator) || !pids[coordinator].is_number_integer() ||
      ::kill(pids[coordinator].get<pid_t>(), SIGUSR2) != 0)
    return NotFound("no running coordinator of the job in " + run_dir);
  return Status::Ok();
}

StatusOr<std::string> QueryStatus(const std::string& run_dir, int timeout_ms) {
  const RunDir dir{run_dir};
  GD_ASSIGN_OR_RETURN(std::string endpoint, ReadFile(dir.endpoint_file()));
  GD_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(dir.job_yaml()));
  std::string secret;
  if (job.security.mode == SecurityMode::kCurve) {
    // Whoever may read the job's secret may ask; a client token lives a minute.
    GD_ASSIGN_OR_RETURN(secret, transport::LoadSecret(job.security.secret_file.empty() ? dir.File("secret")
                                                                                       : job.security.secret_file));
  }
  GD_ASSIGN_OR_RETURN(auto security, cluster::ProbeSecurity(job, secret, dir.coordinator_key(), 60));
  zmq::context_t ctx(1);
  cluster::StatusProbe probe(ctx, job, endpoint, security.first, security.second);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto st = probe.Poll()) {
      std::string out;
      google::protobuf::util::JsonPrintOptions o;
      o.add_whitespace = true;
      o.always_print_primitive_fields = true;
      (void)google::protobuf::util::MessageToJsonString(*st, &out, o);
      return out;
    }
    probe.Wait(50);
  }
  return Unavailable("no answer from the coordinator at " + endpoint + " within " + std::to_string(timeout_ms) + " ms");
}

}  // namespace geodesic::deploy
