#include "tests/integration/harness.h"
#include "tests/test_paths.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace geodesic::testing {
namespace {

pid_t Spawn(const std::vector<std::string>& args, int out_fd, bool program = false) {
  std::vector<std::string> argv;
  if (!program) argv.push_back(::geodesic::testing::GeodesicBinary());
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargs;
  for (auto& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    // Dies with the test (a ctest timeout kills the test, not its process
    // groups); a launcher's children follow it (deploy/process.cc).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    execv(cargs[0], cargs.data());
    _exit(127);
  }
  return pid;
}

int WaitPid(pid_t pid, double timeout_s, int* sig, bool* timed_out) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      if (timed_out) *timed_out = true;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFSIGNALED(status)) {
    if (sig) *sig = WTERMSIG(status);
    return -1;
  }
  return WEXITSTATUS(status);
}

}  // namespace

RunResult RunGeodesic(const std::vector<std::string>& args, double timeout_s) {
  char tmpl[] = "/tmp/gd-run-XXXXXX";
  int fd = mkstemp(tmpl);
  RunResult r;
  pid_t pid = Spawn(args, fd);
  r.exit_code = WaitPid(pid, timeout_s, &r.signal, &r.timed_out);
  close(fd);
  r.output = ReadText(tmpl);
  unlink(tmpl);
  return r;
}

Process::Process(const std::vector<std::string>& args, const std::string& log_file, bool program) {
  int fd = open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_ = Spawn(args, fd, program);
  close(fd);
}

Process::~Process() {
  if (!reaped_ && pid_ > 0) {
    kill(-pid_, SIGKILL);  // its group: a script's or launcher's children with it
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

int Process::Wait(double timeout_s) {
  if (reaped_) return exit_code_;
  int sig = 0;
  exit_code_ = WaitPid(pid_, timeout_s, &sig, nullptr);
  reaped_ = true;
  return exit_code_;
}

void Process::Signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json ReadJson(const std::string& path) {
  std::string text = ReadText(path);
  if (text.empty()) return nullptr;
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception&) {
    return nullptr;
  }
}

bool WaitForFile(const std::string& path, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

cluster::MemberOptions TestWorker(const std::string& job, const std::string& coordinator, uint64_t num_params) {
  cluster::MemberOptions mo;
  mo.job = job;
  mo.role = wire::WORKER;
  mo.id = 0;
  mo.coordinator = coordinator;
  mo.model.set_name("synthetic");
  mo.model.set_num_params(num_params);
  mo.model.set_layout_digest(1);
  mo.timing.heartbeat_ms = 100;
  mo.timing.lease_ms = 60000;
  mo.timing.rendezvous_timeout_s = 20;
  return mo;
}

void ExpectEveryPushAccountedFor(const nlohmann::json& summary, const std::set<int>& killed_workers) {
  ASSERT_TRUE(summary.contains("push_accounting")) << summary.dump(2);
  const nlohmann::json& acc = summary["push_accounting"];
  ASSERT_FALSE(acc["workers"].empty()) << acc.dump(2);
  EXPECT_FALSE(acc.contains("unreadable_ledgers")) << acc.dump(2);
  uint64_t taken = 0;
  for (const auto& [id, w] : acc["workers"].items()) {
    const auto pushed = w["pushed"].get<uint64_t>(), acked = w["acknowledged"].get<uint64_t>(),
               tk = w["taken"].get<uint64_t>(), in_flight = w["in_flight_at_exit"].get<uint64_t>(),
               answered_no = w["dropped"].get<uint64_t>() + w["refused"].get<uint64_t>();
    taken += tk;
    EXPECT_GT(acked, 0u) << "worker " << id << ": " << w.dump();
    EXPECT_GE(tk, acked) << "worker " << id << " lost acknowledged updates: " << w.dump();
    EXPECT_LE(tk, pushed - answered_no) << "worker " << id << " had more taken than it pushed: " << w.dump();
    if (killed_workers.count(std::stoi(id))) {
      EXPECT_LE(tk - acked, in_flight) << "worker " << id << ": " << w.dump();
    } else {
      EXPECT_EQ(w["processes"], 1) << "worker " << id << ": " << w.dump();
      EXPECT_EQ(in_flight, 0u) << "worker " << id << " exited with pushes unanswered: " << w.dump();
      EXPECT_EQ(tk, acked) << "worker " << id << ": " << w.dump();
    }
  }
  EXPECT_EQ(taken, summary["updates_taken"].get<uint64_t>()) << acc.dump(2);
  if (killed_workers.empty()) {
    EXPECT_EQ(summary["pushes_acknowledged"], summary["updates_taken"]);
  }
}

}  // namespace geodesic::testing
