#include "cli/command.h"

#include <signal.h>

#include "common/log.h"

namespace geodesic::cli {

std::atomic<bool> g_stop{false};
std::atomic<uint64_t> g_checkpoint_requests{0};
std::atomic<uint64_t> g_replan_requests{0};

namespace {
void OnSignal(int) { g_stop.store(true); }
void OnCheckpointSignal(int) { g_checkpoint_requests.fetch_add(1); }
void OnReplanSignal(int) { g_replan_requests.fetch_add(1); }
}  // namespace

void InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  sa.sa_handler = OnCheckpointSignal;
  sigaction(SIGUSR1, &sa, nullptr);
  sa.sa_handler = OnReplanSignal;
  sigaction(SIGUSR2, &sa, nullptr);
}

int Fail(const Status& s) {
  if (s.code() == Code::kCancelled) {
    GD_LOG(INFO) << "stopped: " << s.message();
    return 130;
  }
  GD_LOG(ERROR) << s;
  return s.detail() == Detail::kJobFatal ? kExitJobFatal : 1;
}

}  // namespace geodesic::cli
