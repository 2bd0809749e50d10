// Security for a job with `security.mode: curve` (docs/security.md):
// CurveZMQ keypairs, the job's shared secret, join tokens, and a ZAP handler
// that admits only authorized CURVE client keys.
//
// - Keys are Z85 text (40 characters), as ZeroMQ takes them. Each process
//   makes one fresh keypair at start-up and uses it both as a CURVE server
//   (its ROUTER, if it binds one) and as a CURVE client (its DEALERs), so the
//   key a shard registered with is the key workers must see it serve with.
// - A join token is `gdt1.<job>.<role>.<id|*>.<expiry unix s>.<hex HMAC>`,
//   the HMAC-SHA256 under the job's secret of the five fields before it.
//   Whoever holds the secret (the launcher, `geodesic token`, the
//   coordinator) can mint and verify; a member only presents its token.
// - ZapHandler answers ZeroMQ's authentication requests for every CURVE
//   server socket of the process's context. One per zmq::context_t (ZeroMQ
//   allows one ZAP endpoint per context); it must be started before a
//   secured socket binds, or ZeroMQ admits everyone (Debian's libzmq has no
//   stable option to fail closed). It counts what it refuses and logs it
//   (at most one line a second, with how many were left out), and, for the
//   sockets it Watches, counts and logs the handshakes ZeroMQ fails before
//   ZAP is asked (a plaintext peer; a client that expects another server key).
//
// Free functions are thread-safe. ZapHandler runs its own thread; its
// allow-list methods and counters may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/throttle.h"

namespace geodesic::transport {

// FailedPrecondition naming the Debian package if this libzmq lacks CURVE.
Status RequireCurve();

struct CurveKeyPair {
  std::string public_key;  // Z85, 40 characters; may be published
  std::string secret_key;  // Z85, 40 characters; never leaves the process
};

// A fresh keypair (libsodium's randomness, through ZeroMQ).
StatusOr<CurveKeyPair> GenerateCurveKeyPair();
// A keypair that outlives its process: loaded from `path` if it exists
// (mode 0600, "PUBLIC\nSECRET\n" in Z85; refused, like the job secret, if
// other users may read it, or with the reason if it is not a keypair),
// else generated and written there, mode 0600, durably. A restarted
// coordinator keeps its key this way, so that members that know it
// reconnect (docs/security.md).
StatusOr<CurveKeyPair> LoadOrCreateKeyPair(const std::string& path);
// A keypair from its text ("PUBLIC\nSECRET\n", as in the file); `what`
// names where it came from in errors.
StatusOr<CurveKeyPair> ParseKeyPair(const std::string& text, const std::string& what);
// Whether `key` is 40 characters of Z85 that decode to 32 bytes.
bool IsCurveKey(const std::string& key);

// The job secret: at least 32 bytes of text (the launcher writes 64 hex
// characters of 32 random bytes), surrounding whitespace ignored. Loading
// refuses a file that other users may read or write (chmod 600), like ssh.
StatusOr<std::string> LoadSecret(const std::string& path);
// The job secret from its text (an environment value: Kubernetes hands
// secrets to containers that way); `what` names where it came from.
StatusOr<std::string> ParseSecret(const std::string& text, const std::string& what);
// Creates `path` with a fresh random secret, mode 0600; AlreadyExists if it
// exists (never overwrites a secret that tokens were minted with).
Status CreateSecretFile(const std::string& path);

// Roles a token may name: server, worker, evaluator, aggregator (its id: the
// region's index in the job file), client.
bool IsTokenRole(const std::string& role);

struct TokenClaims {
  std::string job;
  std::string role;
  int id = -1;  // -1: any id of the role ("*")
  int64_t expiry_unix = 0;
};

// InvalidArgument if a claim cannot be written into a token (a job or role
// name outside [A-Za-z0-9_-], an id < -1, a secret shorter than 32 bytes).
StatusOr<std::string> MintToken(const std::string& secret, const TokenClaims& claims);

// Checks `token` for job `job`, role `role` and id `id` (< 0: any id) at
// `now_unix`.
// Unauthenticated, with the reason (malformed, bad signature, other job,
// other role or id, expired), otherwise the token's claims. The signature is
// compared in constant time and checked before any claim is believed.
StatusOr<TokenClaims> VerifyToken(const std::string& secret, const std::string& token, const std::string& job,
                                  const std::string& role, int id, int64_t now_unix);

// Seconds since the Unix epoch, for token expiry.
int64_t UnixNow();

// What a member process (server, worker, evaluator) needs in a secured job.
// Empty keys: plaintext.
struct MemberCredentials {
  CurveKeyPair keys;            // this process's, fresh at start-up
  std::string coordinator_key;  // the coordinator's public key (Z85)
  std::string token;            // join token for this role and id
  bool enabled() const { return !keys.secret_key.empty(); }
};

// CURVE settings of one socket (transport::SocketOptions carries one). Empty keys:
// plaintext. A ROUTER with keys is a CURVE server (ZAP domain "geodesic");
// a DEALER with keys is a CURVE client and needs `server_key`.
struct CurveSocket {
  CurveKeyPair keys = {};
  std::string server_key = {};  // clients: the public key of the socket they connect to
  bool enabled() const { return !keys.secret_key.empty(); }
};
// Applies `curve` to a socket before it binds or connects.
Status ApplyCurve(zmq::socket_t& socket, const CurveSocket& curve, bool server);

// Why ZeroMQ failed a handshake, from a socket monitor's
// ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL or _PROTOCOL event and its value,
// for the log (ConnectionGuard).
std::string DescribeHandshakeFailure(uint16_t event, uint32_t value);

class ZapHandler {
 public:
  // `admit_any`: admit every CURVE client (the coordinator, where a join
  // token, not the key, decides); otherwise only keys in the allow-list.
  ZapHandler(zmq::context_t& ctx, bool admit_any);
  ~ZapHandler();  // stops and joins the thread
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  // Binds inproc://zeromq.zap.01 and starts answering. Fails if another
  // handler already serves this context.
  Status Start();
  void Stop();

  // Replaces the allow-list (Z85 keys; malformed ones are ignored).
  void SetAllowed(const std::vector<std::string>& keys);
  bool Allowed(const std::string& key) const;

  uint64_t admitted() const { return admitted_.load(); }
  // Connections ZAP refused (a CURVE key not on the list, or no key).
  // ZeroMQ drops a plaintext peer or a client that expects another server
  // key before asking ZAP: the ConnectionGuard that watches the socket
  // counts and logs those (ConnectionGuard::handshake_failures).
  uint64_t refused() const { return refused_.load(); }

 private:
  void Loop();
  void AnswerZap();
  // Logs one refused connection, at most a line a second (the thread's).
  void LogRefusal(const std::string& line);

  zmq::context_t& ctx_;
  const bool admit_any_;
  zmq::socket_t socket_;  // used by the thread only, after Start()
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> admitted_{0}, refused_{0};
  Throttle lines_{std::chrono::seconds(1)};  // the thread's: one refusal line a second
  mutable Mutex mu_;
  std::set<std::string> allowed_ GD_GUARDED_BY(mu_);
};

}  // namespace geodesic::transport
