// The worker and evaluator processes.
//
// RunWorker trains one worker: it loads its partition of Fashion-MNIST,
// builds the model, joins the job, offers initial values, and then loops
// pull -> compute -> push with the next pull already in flight while it
// computes. Worker 0 also saves parameter snapshots for the accuracy curve.
//
// RunEvaluator waits for every worker to finish (or die), pulls the final
// model, evaluates it and the snapshots on the test set, and writes the
// result JSON the launcher folds into the job summary.
//
// Threading: the calling thread trains (it owns the server sockets); a
// MemberClient thread heartbeats. Torch-free header.
#pragma once

#include <atomic>
#include <string>
#include <zmq.hpp>

#include "common/status.h"
#include "config/job.h"
#include "transport/http_endpoint.h"
#include "transport/security.h"

namespace geodesic::worker {

struct WorkerProcessOptions {
  JobSpec job;
  int id = 0;
  std::string coordinator;
  std::string stats_file;                    // stats JSON, written periodically and at exit
  std::string snapshot_dir;                  // worker 0: where parameter snapshots go (empty: none)
  transport::MemberCredentials credentials;  // secured jobs
  // federated.gateway: where the client gateway listens for real clients
  // (the coordinator tells them the bound endpoint). Empty: the worker's
  // region host, any port.
  std::string gateway_bind;
  // Its region's aggregator (regions.NAME.aggregator): pushes and training
  // pulls go there (worker/aggregator_links.h). Empty: straight to the shards.
  std::string aggregator;
  transport::HttpOptions http;  // /metrics, /healthz, /readyz (ready: joined and training)
};

Status RunWorker(const WorkerProcessOptions& options, zmq::context_t& ctx, const std::atomic<bool>* stop);

struct EvaluatorOptions {
  JobSpec job;
  std::string coordinator;
  std::string snapshot_dir;                  // snapshots written by worker 0
  std::string result_file;                   // result JSON
  std::string dump_params;                   // if set, the final parameters as raw float32
  transport::MemberCredentials credentials;  // secured jobs
  transport::HttpOptions http;               // /metrics, /healthz, /readyz (ready: joined)
};

Status RunEvaluator(const EvaluatorOptions& options, zmq::context_t& ctx, const std::atomic<bool>* stop);

}  // namespace geodesic::worker
