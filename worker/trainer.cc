#include "worker/trainer.h"

#include "worker/worker.h"

namespace geodesic::worker {

// RunEvaluator is in evaluator.cc.
Status RunWorker(const WorkerProcessOptions& options, zmq::context_t& ctx, const std::atomic<bool>* stop) {
  Worker worker(options, ctx, stop);
  Status s = worker.Run();
  worker.Linger(s.ok());
  return s;
}

}  // namespace geodesic::worker
