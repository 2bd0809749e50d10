// The spawner (deploy/spawner.h): a child forked from it runs its own argv
// with the launcher's environment and working directory, writes to its log,
// leads its own process group, shows its argv as its command line, and its
// exit (a code or a signal) comes back through Child::Poll; when the spawner
// dies its children get SIGTERM and later children are exec'ed.
//
// Each scenario runs in a forked helper process, since the spawner must be
// started before any thread; the helper writes what it saw to a file that
// the test reads.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "deploy/process.h"
#include "deploy/spawner.h"

namespace geodesic::deploy {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A child started by a spawned "launch": whether it has a spawner of its
// own, and how its own child (argv[2]'s log) ended.
int LaunchProbe(char** argv) {
  std::printf("nested=%d\n", static_cast<int>(SpawnerRunning()));
  // Exec'ed instead, the test binary would run no test and exit 0.
  Child sub("sub", {SelfBinary(), "report", "5", "--gtest_filter=-*"}, argv[2]);
  if (!sub.Start().ok()) return 2;
  for (int i = 0; i < 200 && !sub.Poll(); ++i) ::usleep(50000);
  std::printf("sub_exit=%s\n", sub.exit() ? sub.exit()->Describe().c_str() : "none");
  return 0;
}

// What a spawned child runs instead of main: "report CODE" prints what it
// sees and returns CODE; "sleep" prints its parent and waits to be killed;
// "launch LOG" starts a "report 5" child itself.
int ProbeMain(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "launch") == 0) return LaunchProbe(argv);
  if (argc >= 2 && std::strcmp(argv[1], "sleep") == 0) {
    std::printf("parent=%d\n", static_cast<int>(::getppid()));
    std::fflush(stdout);
    for (int i = 0; i < 300; ++i) ::usleep(100000);  // 30 s at most
    return 0;
  }
  char cwd[4096] = {};
  if (!::getcwd(cwd, sizeof cwd)) cwd[0] = 0;
  std::string cmdline = Slurp("/proc/self/cmdline");
  for (char& c : cmdline)
    if (c == '\0') c = ' ';
  while (!cmdline.empty() && cmdline.back() == ' ') cmdline.pop_back();
  const char* env = std::getenv("GD_SPAWN_TEST");
  std::string comm = Slurp("/proc/self/comm");
  if (!comm.empty() && comm.back() == '\n') comm.pop_back();
  std::printf("env=%s\ncwd=%s\nown_group=%d\ncmdline=%s\ncomm=%s\n", env ? env : "(unset)", cwd,
              static_cast<int>(::getpgid(0) == ::getpid()), cmdline.c_str(), comm.c_str());
  return argc >= 3 ? std::atoi(argv[2]) : 0;
}

// Runs `body` in a forked helper that has started a spawner with this
// process's own argv (where the kernel shows the command line from); returns
// the helper's exit code.
int InHelper(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string cmdline = Slurp("/proc/self/cmdline");
    const auto argc = static_cast<size_t>(std::count(cmdline.begin(), cmdline.end(), '\0'));
    std::vector<char*> argv;
    for (char* p = program_invocation_name; argv.size() < argc; p += std::strlen(p) + 1) argv.push_back(p);
    argv.push_back(nullptr);
    ForkSpawner(static_cast<int>(argv.size() - 1), argv.data(), ProbeMain);
    ::_exit(SpawnerRunning() ? body() : 90);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Polls `c` for up to 10 s.
bool WaitExit(Child& c) {
  for (int i = 0; i < 200; ++i) {
    if (c.Poll()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The first "key=value" line's value in `text`.
std::string Field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + "=", 0) == 0) return line.substr(key.size() + 1);
  return "";
}

// Starts `sleeper` (a "sleep" child logging to `log`) and returns the
// parent it printed, the spawner (waits up to 10 s; -1 if none).
pid_t StartSleeper(Child& sleeper, const std::string& log) {
  if (!sleeper.Start().ok()) return -1;
  for (int i = 0; i < 200; ++i) {
    if (const std::string parent = Field(Slurp(log), "parent"); !parent.empty()) return std::stoi(parent);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

class SpawnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("gd-spawner-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(SpawnerTest, AChildRunsItsArgvWithTheLaunchersEnvironmentAndItsCodeComesBack) {
  const std::string out = Path("out");
  const std::string self = SelfBinary();
  // A command line shorter than this process's, and one longer than its
  // arguments and environment together could hold without the environment's area.
  const std::string longer(300, 'x');
  const int code = InHelper([&] {
    ::setenv("GD_SPAWN_TEST", "set after the spawner started", 1);
    if (::chdir(dir_.c_str()) != 0) return 91;
    std::ofstream o(out);
    for (const std::vector<std::string>& argv :
         {std::vector<std::string>{self, "report", "7"}, std::vector<std::string>{self, "report", "7", longer}}) {
      Child c("probe", argv, Path("probe.log"));
      if (!c.Start().ok()) return 92;
      if (!WaitExit(c)) return 93;
      o << c.exit()->Describe() << "\n" << Slurp(Path("probe.log")) << "--\n";
    }
    return 0;
  });
  ASSERT_EQ(code, 0);
  const std::string seen = Slurp(out);
  const std::string first = seen.substr(0, seen.find("--\n")), second = seen.substr(seen.find("--\n") + 3);
  for (const std::string& s : {first, second}) {
    EXPECT_EQ(s.substr(0, s.find('\n')), "exited 7") << s;
    EXPECT_EQ(Field(s, "env"), "set after the spawner started") << s;
    EXPECT_EQ(Field(s, "cwd"), std::filesystem::canonical(dir_).string()) << s;
    EXPECT_EQ(Field(s, "own_group"), "1") << s;
    EXPECT_EQ(Field(s, "comm"), std::filesystem::path(self).filename().string().substr(0, 15)) << s;
  }
  EXPECT_EQ(Field(first, "cmdline"), self + " report 7") << first;
  EXPECT_EQ(Field(second, "cmdline"), self + " report 7 " + longer) << second;
}

TEST_F(SpawnerTest, ASignalledChildIsReportedKilledBySignal) {
  const std::string out = Path("out");
  const std::string self = SelfBinary();
  const int code = InHelper([&] {
    Child c("sleeper", {self, "sleep"}, Path("sleeper.log"));
    if (!c.Start().ok()) return 92;
    c.Signal(SIGKILL);
    if (!WaitExit(c)) return 93;
    std::ofstream(out) << c.exit()->Describe();
    return 0;
  });
  ASSERT_EQ(code, 0);
  EXPECT_EQ(Slurp(out), "killed by SIGKILL");
}

TEST_F(SpawnerTest, WhenTheSpawnerDiesItsChildrenEndAndLaterOnesAreExeced) {
  const std::string log = Path("sleeper.log"), out = Path("out");
  const std::string self = SelfBinary();
  const int code = InHelper([&] {
    Child c("sleeper", {self, "sleep"}, log);
    const pid_t spawner = StartSleeper(c, log);
    if (spawner <= 0 || spawner == ::getpid()) return 94;  // the spawner is its parent
    ::kill(spawner, SIGKILL);
    if (!WaitExit(c)) return 93;
    Child later("later", {"/bin/sh", "-c", "exit 3"}, Path("later.log"));
    if (!later.Start().ok() || !WaitExit(later)) return 95;
    std::ofstream(out) << c.exit()->Describe() << "\n"
                       << later.exit()->Describe() << "\n"
                       << (SpawnerRunning() ? "running" : "gone");
    return 0;
  });
  ASSERT_EQ(code, 0);
  EXPECT_EQ(Slurp(out), "killed by SIGTERM\nexited 3\ngone");
}

// A spawned child whose subcommand starts children (a sweep's launch) forks
// them from a spawner of its own, and they show their command lines.
TEST_F(SpawnerTest, ALaunchingChildGetsASpawnerOfItsOwn) {
  const std::string log = Path("launch.log"), sub = Path("sub.log"), out = Path("out");
  const std::string self = SelfBinary();
  const int code = InHelper([&] {
    Child c("launch", {self, "launch", sub}, log);
    if (!c.Start().ok() || !WaitExit(c)) return 92;
    std::ofstream(out) << c.exit()->Describe();
    return 0;
  });
  ASSERT_EQ(code, 0);
  EXPECT_EQ(Slurp(out), "exited 0");
  const std::string seen = Slurp(log), below = Slurp(sub);
  EXPECT_EQ(Field(seen, "nested"), "1") << seen;
  EXPECT_EQ(Field(seen, "sub_exit"), "exited 5") << seen;
  EXPECT_EQ(Field(below, "cmdline"), self + " report 5 --gtest_filter=-*") << below;
}

// A spawner that does not answer within 10 s is killed, so that it cannot
// start the child late, and the child is exec'ed instead: here the test
// binary, told to run no test ("exited 0"), where the spawned probe would
// have said "exited 7".
TEST_F(SpawnerTest, AStuckSpawnerIsKilledAndTheChildExeced) {
  const std::string log = Path("sleeper.log"), out = Path("out");
  const std::string self = SelfBinary();
  const int code = InHelper([&] {
    Child first("sleeper", {self, "sleep"}, log);
    const pid_t spawner = StartSleeper(first, log);
    if (spawner <= 0) return 94;
    ::kill(spawner, SIGSTOP);
    Child late("late", {self, "report", "7", "--gtest_filter=-*"}, Path("late.log"));
    if (!late.Start().ok() || !WaitExit(late) || !WaitExit(first)) return 95;
    std::ofstream(out) << late.exit()->Describe() << "\n"
                       << first.exit()->Describe() << "\n"
                       << (::kill(spawner, 0) == 0 ? "spawner alive" : "spawner gone");
    return 0;
  });
  ASSERT_EQ(code, 0);
  EXPECT_EQ(Slurp(out), "exited 0\nkilled by SIGTERM\nspawner gone");
}

}  // namespace
}  // namespace geodesic::deploy
