#pragma once

// Clang's thread-safety annotations (-Wthread-safety), and a Mutex that
// carries them: a member marked GD_GUARDED_BY(mu_) may be touched only with
// mu_ held, and clang checks that at compile time (the clang build of
// scripts/fuzz.sh turns the warnings into errors). Under g++ the macros
// expand to nothing. libstdc++'s std::mutex has no annotations, so shared
// state uses this Mutex and MutexLock instead; both are as cheap as
// std::mutex and std::lock_guard. CondVar waits on a held Mutex.
// Thread-safe.

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define GD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define GD_THREAD_ANNOTATION(x)
#endif

#define GD_CAPABILITY(x) GD_THREAD_ANNOTATION(capability(x))
#define GD_SCOPED_CAPABILITY GD_THREAD_ANNOTATION(scoped_lockable)
#define GD_GUARDED_BY(x) GD_THREAD_ANNOTATION(guarded_by(x))
#define GD_PT_GUARDED_BY(x) GD_THREAD_ANNOTATION(pt_guarded_by(x))
#define GD_REQUIRES(...) GD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define GD_EXCLUDES(...) GD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define GD_ACQUIRE(...) GD_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define GD_RELEASE(...) GD_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define GD_NO_THREAD_SAFETY_ANALYSIS GD_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace geodesic {

class GD_CAPABILITY("mutex") Mutex {
 public:
  void Lock() GD_ACQUIRE() { mu_.lock(); }
  void Unlock() GD_RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class GD_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) GD_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() GD_RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// A condition variable for Mutex. Wait() releases the held mutex while it
// sleeps and holds it again when it returns, as std::condition_variable
// does; the analysis sees the mutex held throughout, which is what the
// caller's code between the waits may rely on. Wait in a loop on the
// condition itself (`while (!ready_) cv_.Wait(mu_);`): a lambda predicate
// would be analysed without the mutex.
class CondVar {
 public:
  void Wait(Mutex& mu) GD_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Waits at most `timeout`; false if it passed without a signal.
  template <typename Rep, typename Period>
  bool WaitFor(Mutex& mu, std::chrono::duration<Rep, Period> timeout) GD_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool signalled = cv_.wait_for(lock, timeout) == std::cv_status::no_timeout;
    lock.release();
    return signalled;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace geodesic
