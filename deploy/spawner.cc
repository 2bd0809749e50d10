#include "deploy/spawner.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>

#include "common/thread_annotations.h"
#include "deploy/process.h"

extern char** environ;

namespace geodesic::deploy {
namespace {

// Messages on the socket pair (SOCK_SEQPACKET keeps their boundaries).
// Launcher -> spawner: a SpawnRequest header, then cwd, argv and env as
// NUL-terminated strings, with the log file as SCM_RIGHTS. Spawner ->
// launcher: Report, for a started child (kSpawned) or a reaped one (kExited).
constexpr size_t kMaxRequest = 192 << 10;  // under the default socket buffer
struct SpawnRequest {
  uint32_t argc = 0, envc = 0;
};
enum ReportKind : int32_t { kSpawned = 1, kExited = 2 };
struct Report {
  int32_t kind = 0;
  int32_t pid = -1;               // kSpawned: -errno when the fork failed
  int32_t code = -1, signal = 0;  // kExited: as ExitInfo
  double cpu_seconds = 0, max_rss_mb = 0;
};

// The launcher's side. One socket, used under the lock.
struct Link {
  Mutex mu;
  int sock GD_GUARDED_BY(mu) = -1;
  pid_t pid GD_GUARDED_BY(mu) = -1;                   // the spawner's
  bool gone GD_GUARDED_BY(mu) = false;                // the spawner closed its end
  std::map<pid_t, ExitInfo> exits GD_GUARDED_BY(mu);  // reported, not yet collected
  std::optional<Report> spawned GD_GUARDED_BY(mu);    // the reply to the request in flight
};
Link& TheLink() {
  static Link* link = new Link;  // never destroyed: children may be polled until _Exit
  return *link;
}

// The spawner's side: where this process's command line is shown
// (/proc/PID/cmdline), so that `ps` and pgrep name each child by its own:
// the argument strings, then the environment strings after them.
char* title_begin = nullptr;
size_t title_args = 0, title_size = 0;

bool StartsChildren(const char* subcommand) {
  for (const char* s : {"launch", "bench", "sweep"})
    if (std::strcmp(subcommand, s) == 0) return true;
  return false;
}

// The contiguous area of the argument and environment strings, as the
// kernel laid them out for exec; none (no titles) if they are not.
void FindTitleArea(int argc, char** argv) {
  char* end = argv[0];
  for (int i = 0; i < argc; ++i) {
    if (argv[i] != end) return;
    end += std::strlen(argv[i]) + 1;
  }
  title_args = static_cast<size_t>(end - argv[0]);
  for (char** e = environ; e && *e && *e == end; ++e) end += std::strlen(*e) + 1;
  title_begin = argv[0];
  title_size = static_cast<size_t>(end - argv[0]);
}

// Names the process after `argv`: its comm, as exec would, and its command
// line. Arguments that fit where the old ones were keep their separators;
// longer ones become one string over the environment's area too (the
// setproctitle technique, which the kernel reads up to the first NUL; the
// environment was copied to the heap before).
void SetTitle(const std::vector<char*>& argv) {
  program_invocation_name = argv[0];  // they pointed into the old strings
  const char* slash = std::strrchr(argv[0], '/');
  program_invocation_short_name = slash ? const_cast<char*>(slash + 1) : argv[0];
  ::prctl(PR_SET_NAME, program_invocation_short_name);  // exec names it so; not gd-spawner
  if (!title_begin || title_size < 2) return;
  std::string t;
  for (char* a : argv)
    if (a) t.append(a, std::strlen(a) + 1);
  if (t.size() > title_args) {
    t.pop_back();
    std::replace(t.begin(), t.end(), '\0', ' ');
  }
  const size_t n = std::min({t.size(), title_size - 1, size_t{4095}});
  std::memcpy(title_begin, t.data(), n);
  std::memset(title_begin + n, 0, title_size - n);
}

// Values an exec'ed child's libraries read at load: applied by hand, since
// the spawner loaded them with the launcher's environment.
void ApplyThreadEnv() {
  using SetThreads = void (*)(int);
  for (const auto& [var, fn] : {std::pair{"OPENBLAS_NUM_THREADS", "openblas_set_num_threads"},
                                std::pair{"OMP_NUM_THREADS", "omp_set_num_threads"}}) {
    const char* v = std::getenv(var);
    const int n = v ? std::atoi(v) : 0;
    if (n <= 0) continue;
    if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, fn))) set(n);
  }
}

bool Wanted(size_t argc, char* const* argv);
void Fork(SpawnMain run);

// In the spawner's fork: becomes the child Child::Start would exec, then
// runs it. `strings` holds cwd, argv and env back to back.
[[noreturn]] void BecomeChild(pid_t spawner, int log_fd, const SpawnRequest& req, std::vector<char>& strings,
                              SpawnMain run) {
  if (!EnterChild(spawner, log_fd)) ::_exit(127);
  std::vector<char*> ptrs;
  for (char* p = strings.data(); p < strings.data() + strings.size(); p += std::strlen(p) + 1) ptrs.push_back(p);
  char* cwd = ptrs[0];
  std::vector<char*> argv(ptrs.begin() + 1, ptrs.begin() + 1 + req.argc);
  argv.push_back(nullptr);
  ::clearenv();
  for (uint32_t i = 0; i < req.envc; ++i) ::putenv(ptrs[1 + req.argc + i]);  // `strings` lives until exit
  if (::chdir(cwd) != 0) {
    const char msg[] = "spawner: cannot enter the working directory\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)ignored;
    ::_exit(127);
  }
  ApplyThreadEnv();
  SetTitle(argv);
  // A child that starts children itself (a sweep's or a bench's launch)
  // gets a spawner of its own, forked while it is still single-threaded;
  // its children show their command lines where this one does.
  if (Wanted(req.argc, argv.data())) Fork(run);
  const int code = run(static_cast<int>(req.argc), argv.data());
  std::fflush(nullptr);
  ::_exit(code);
}

void Send(int sock, const Report& r) { (void)::send(sock, &r, sizeof r, MSG_NOSIGNAL); }

// Reads one request and forks its child; false when the launcher is gone.
bool ServeRequest(int sock, int sig_fd, const sigset_t& old_mask, SpawnMain run) {
  std::vector<char> buf(kMaxRequest);
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  if (n == 0 || (n < 0 && errno != EINTR)) return false;
  if (n < 0) return true;
  int log_fd = -1;
  if (cmsghdr* c = CMSG_FIRSTHDR(&msg); c && c->cmsg_type == SCM_RIGHTS)
    std::memcpy(&log_fd, CMSG_DATA(c), sizeof(int));
  SpawnRequest req;
  Report r{kSpawned, -EINVAL};
  if (log_fd < 0 || static_cast<size_t>(n) < sizeof req) {
    Send(sock, r);
    return true;
  }
  std::memcpy(&req, buf.data(), sizeof req);
  std::vector<char> strings(buf.begin() + sizeof req, buf.begin() + n);
  const pid_t self = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    ::close(sig_fd);
    ::close(sock);
    BecomeChild(self, log_fd, req, strings, run);
  }
  r.pid = pid > 0 ? pid : -errno;
  ::close(log_fd);
  Send(sock, r);
  return true;
}

// Reports every child that has ended.
void Reap(int sock) {
  int status = 0;
  rusage usage{};
  for (pid_t pid; (pid = ::wait4(-1, &status, WNOHANG, &usage)) > 0;) {
    const ExitInfo e = ExitFromWait(status, usage);
    Send(sock, {kExited, pid, e.code, e.signal, e.cpu_seconds, e.max_rss_mb});
  }
}

[[noreturn]] void Serve(int sock, pid_t launcher, SpawnMain run) {
  ::setpgid(0, 0);  // out of the terminal's foreground group
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(0);
  ::prctl(PR_SET_NAME, "gd-spawner");
  const int null_fd = ::open("/dev/null", O_RDWR);
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(null_fd, STDOUT_FILENO);
  if (sock > 3) ::close_range(3, sock - 1, 0);
  ::close_range(sock + 1, ~0U, 0);
  sigset_t chld, old_mask;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, &old_mask);
  const int sig_fd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  for (;;) {
    pollfd fds[2] = {{sock, POLLIN, 0}, {sig_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) ::_exit(1);
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(sig_fd, &info, sizeof info) == sizeof info) {
      }
      Reap(sock);
    }
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) && !ServeRequest(sock, sig_fd, old_mask, run)) ::_exit(0);
  }
}

// Launcher side: the spawner has ended or was killed; reaps it.
void Bury(Link& l) GD_REQUIRES(l.mu) {
  l.gone = true;
  if (l.pid > 0) ::waitpid(l.pid, nullptr, 0);
  l.pid = -1;
}

// Launcher side: takes every report waiting (or, with `block`, waits for the
// reply to a request). Under the lock.
void Drain(Link& l, bool block) GD_REQUIRES(l.mu) {
  for (;;) {
    if (block && l.spawned) return;
    if (block) {
      pollfd p{l.sock, POLLIN, 0};
      if (::poll(&p, 1, 10000) <= 0) {
        // A spawner that does not answer is as good as gone; killed, so
        // that it cannot start the child the caller now execs (whatever it
        // did start gets SIGTERM with it).
        ::kill(l.pid, SIGKILL);
        Bury(l);
        return;
      }
    }
    Report r;
    const ssize_t n = ::recv(l.sock, &r, sizeof r, block ? 0 : MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !block) return;
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof r)) {
      Bury(l);
      return;
    }
    if (r.kind == kSpawned) {
      l.spawned = r;
      continue;
    }
    ExitInfo info;
    info.code = r.code;
    info.signal = r.signal;
    info.cpu_seconds = r.cpu_seconds;
    info.max_rss_mb = r.max_rss_mb;
    l.exits[r.pid] = info;
  }
}

// Whether `pid` is gone or a zombie waiting for whoever adopted it.
bool Ended(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

// Whether a process running `argv` starts children through a spawner.
bool Wanted(size_t argc, char* const* argv) {
#if defined(__SANITIZE_ADDRESS__)
  return false;  // children exit normally under AddressSanitizer, for the leak check: exec them
#endif
  if (argc < 2 || !StartsChildren(argv[1])) return false;
  const char* mode = std::getenv("GEODESIC_SPAWN");
  return !mode || std::strcmp(mode, "exec") != 0;
}

void Fork(SpawnMain run) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return;
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(sv[0]);
    Serve(sv[1], launcher, run);
  }
  ::close(sv[1]);
  if (pid < 0) {
    ::close(sv[0]);
    return;
  }
  Link& l = TheLink();
  MutexLock lock(l.mu);
  l.sock = sv[0];
  l.pid = pid;
}

}  // namespace

void StartSpawner(int argc, char** argv, SpawnMain run) {
  if (!Wanted(static_cast<size_t>(argc), argv)) return;
  FindTitleArea(argc, argv);
  Fork(run);
}

void ForkSpawner(int argc, char** argv, SpawnMain run) {
  FindTitleArea(argc, argv);
  Fork(run);
}

bool SpawnerRunning() {
  Link& l = TheLink();
  MutexLock lock(l.mu);
  return l.sock >= 0 && !l.gone;
}

StatusOr<pid_t> SpawnChild(const std::vector<std::string>& argv, int log_fd) {
  Link& l = TheLink();
  MutexLock lock(l.mu);
  if (l.sock < 0 || l.gone) return Unavailable("no spawner");
  char cwd[PATH_MAX];
  if (!::getcwd(cwd, sizeof cwd)) return Unavailable("no working directory");
  SpawnRequest req{static_cast<uint32_t>(argv.size()), 0};
  std::string body(cwd, std::strlen(cwd) + 1);
  for (const std::string& a : argv) body.append(a.c_str(), a.size() + 1);
  for (char** e = environ; e && *e; ++e, ++req.envc) body.append(*e, std::strlen(*e) + 1);
  if (body.size() + sizeof req > kMaxRequest) return Unavailable("command line and environment too large to spawn");
  body.insert(0, reinterpret_cast<const char*>(&req), sizeof req);
  iovec iov{body.data(), body.size()};
  char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &log_fd, sizeof(int));
  if (::sendmsg(l.sock, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(body.size())) {
    Bury(l);
    return Unavailable("the spawner is gone");
  }
  l.spawned.reset();
  Drain(l, /*block=*/true);
  if (!l.spawned) return Unavailable("the spawner is gone");
  const Report r = *l.spawned;
  l.spawned.reset();
  if (r.pid < 0) return Unavailable(std::string("spawner: fork failed: ") + std::strerror(-r.pid));
  return static_cast<pid_t>(r.pid);
}

std::optional<ExitInfo> SpawnedExit(pid_t pid) {
  Link& l = TheLink();
  MutexLock lock(l.mu);
  if (!l.gone) Drain(l, /*block=*/false);
  if (auto it = l.exits.find(pid); it != l.exits.end()) {
    ExitInfo info = it->second;
    l.exits.erase(it);
    return info;
  }
  // The spawner died (its children got SIGTERM with it): a child it never
  // reported has ended once its pid is gone.
  if (l.gone && Ended(pid)) {
    ExitInfo info;
    info.signal = SIGTERM;
    return info;
  }
  return std::nullopt;
}

}  // namespace geodesic::deploy
