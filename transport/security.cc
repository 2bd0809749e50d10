#include "transport/security.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <zmq.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "common/files.h"
#include "common/log.h"
#include "transport/interrupted.h"

namespace geodesic::transport {
namespace {

constexpr size_t kMinSecretBytes = 32;
constexpr const char* kTokenVersion = "gdt1";
constexpr const char* kZapDomain = "geodesic";

bool NameChars(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

bool AllDigits(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string Hex(const unsigned char* data, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

// The MAC covers the version and every claim, each length-prefixed so that
// no two different claim sets give the same input.
std::string MacInput(const std::string& job, const std::string& role, const std::string& id,
                     const std::string& expiry) {
  std::string in;
  for (const std::string* f : {&job, &role, &id, &expiry}) in += std::to_string(f->size()) + ":" + *f + ";";
  return std::string(kTokenVersion) + ";" + in;
}

std::string Mac(const std::string& secret, const std::string& input) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(input.data()), input.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    parts.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return parts;
    start = at + 1;
  }
}

}  // namespace

Status RequireCurve() {
  if (!zmq_has("curve"))
    return FailedPrecondition(
        "security.mode curve needs a libzmq built with CURVE (libsodium); Debian's libzmq5 has it: "
        "apt-get install libzmq5");
  return Status::Ok();
}

StatusOr<CurveKeyPair> GenerateCurveKeyPair() {
  GD_RETURN_IF_ERROR(RequireCurve());
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    return Internal(std::string("cannot generate a CURVE keypair: ") + zmq_strerror(zmq_errno()));
  return CurveKeyPair{pub, sec};
}

StatusOr<CurveKeyPair> LoadOrCreateKeyPair(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    GD_ASSIGN_OR_RETURN(CurveKeyPair keys, GenerateCurveKeyPair());
    GD_RETURN_IF_ERROR(WriteFileAtomic(path, keys.public_key + "\n" + keys.secret_key + "\n", /*durable=*/true, 0600));
    return keys;
  }
  if (st.st_mode & 077)
    return FailedPrecondition("the keypair file '" + path + "' may be read or written by other users; run: chmod 600 " +
                              path);
  GD_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseKeyPair(text, "'" + path + "'");
}

StatusOr<CurveKeyPair> ParseKeyPair(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  CurveKeyPair keys;
  std::string extra;
  if (!(in >> keys.public_key >> keys.secret_key) || (in >> extra) || !IsCurveKey(keys.public_key) ||
      !IsCurveKey(keys.secret_key))
    return DataLoss(what + " is not a CURVE keypair (two lines of 40 Z85 characters: public, then secret)");
  char derived[41];
  if (zmq_curve_public(derived, keys.secret_key.c_str()) != 0 || keys.public_key != derived)
    return DataLoss(what + ": the public key is not the secret key's");
  return keys;
}

bool IsCurveKey(const std::string& key) {
  if (key.size() != 40) return false;
  uint8_t raw[32];
  return zmq_z85_decode(raw, key.c_str()) != nullptr;
}

StatusOr<std::string> LoadSecret(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return NotFound("cannot read the job secret '" + path + "'");
  if (st.st_mode & 077)
    return FailedPrecondition("the job secret '" + path + "' may be read or written by other users; run: chmod 600 " +
                              path);
  GD_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseSecret(text, "the job secret '" + path + "'");
}

StatusOr<std::string> ParseSecret(const std::string& text, const std::string& what) {
  size_t b = text.find_first_not_of(" \t\r\n"), e = text.find_last_not_of(" \t\r\n");
  std::string secret = b == std::string::npos ? "" : text.substr(b, e - b + 1);
  if (secret.size() < kMinSecretBytes)
    return InvalidArgument(what + " has " + std::to_string(secret.size()) + " bytes; it needs at least " +
                           std::to_string(kMinSecretBytes));
  return secret;
}

Status CreateSecretFile(const std::string& path) {
  if (std::filesystem::exists(path)) return Status(Code::kAlreadyExists, "the job secret '" + path + "' exists");
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof(raw)) != 1) return Internal("OpenSSL RAND_bytes failed");
  std::string text = Hex(raw, sizeof(raw)) + "\n";
  OPENSSL_cleanse(raw, sizeof(raw));
  return WriteFileAtomic(path, text, /*durable=*/true, 0600);
}

bool IsTokenRole(const std::string& role) {
  return role == "server" || role == "worker" || role == "evaluator" || role == "client" || role == "aggregator";
}

StatusOr<std::string> MintToken(const std::string& secret, const TokenClaims& c) {
  if (secret.size() < kMinSecretBytes) return InvalidArgument("the job secret is shorter than 32 bytes");
  if (!NameChars(c.job)) return InvalidArgument("job name '" + c.job + "' cannot go into a token");
  if (!IsTokenRole(c.role))
    return InvalidArgument("token role '" + c.role + "': use server, worker, evaluator, aggregator or client");
  if (c.id < -1) return InvalidArgument("token id must be >= 0, or -1 for any");
  if (c.expiry_unix <= 0) return InvalidArgument("token expiry must be a positive Unix time");
  std::string id = c.id < 0 ? "*" : std::to_string(c.id);
  std::string expiry = std::to_string(c.expiry_unix);
  std::string mac = Mac(secret, MacInput(c.job, c.role, id, expiry));
  return std::string(kTokenVersion) + "." + c.job + "." + c.role + "." + id + "." + expiry + "." +
         Hex(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
}

StatusOr<TokenClaims> VerifyToken(const std::string& secret, const std::string& token, const std::string& job,
                                  const std::string& role, int id, int64_t now_unix) {
  if (token.empty()) return Unauthenticated("no join token (this job runs with security.mode curve)");
  if (token.size() > 512) return Unauthenticated("malformed join token (" + std::to_string(token.size()) + " bytes)");
  std::vector<std::string> f = Split(token, '.');
  if (f.size() != 6 || f[0] != kTokenVersion)
    return Unauthenticated("malformed join token: expected gdt1.<job>.<role>.<id|*>.<expiry>.<mac>");
  const std::string &t_job = f[1], &t_role = f[2], &t_id = f[3], &t_expiry = f[4], &t_mac = f[5];
  if (!NameChars(t_job) || !IsTokenRole(t_role) || !(t_id == "*" || AllDigits(t_id)) || !AllDigits(t_expiry) ||
      t_mac.size() != 64)
    return Unauthenticated("malformed join token: a field is out of its alphabet or length");
  std::string given(32, '\0');
  for (size_t i = 0; i < 32; ++i) {
    auto nib = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int hi = nib(t_mac[2 * i]), lo = nib(t_mac[2 * i + 1]);
    if (hi < 0 || lo < 0) return Unauthenticated("malformed join token: the MAC is not lowercase hex");
    given[i] = static_cast<char>(hi * 16 + lo);
  }
  std::string want = Mac(secret, MacInput(t_job, t_role, t_id, t_expiry));
  if (want.size() != given.size() || CRYPTO_memcmp(want.data(), given.data(), want.size()) != 0)
    return Unauthenticated("join token signature does not match: forged, altered, or minted with another secret");
  TokenClaims c;
  c.job = t_job;
  c.role = t_role;
  c.id = t_id == "*" ? -1 : std::stoi(t_id);
  c.expiry_unix = std::stoll(t_expiry);
  if (c.job != job) return Unauthenticated("join token is for job '" + c.job + "', this is job '" + job + "'");
  if (c.role != role) return Unauthenticated("join token is for role " + c.role + ", not " + role);
  if (c.id >= 0 && id >= 0 && c.id != id)
    return Unauthenticated("join token is for " + c.role + " " + t_id + ", not " + role + " " + std::to_string(id));
  if (now_unix >= c.expiry_unix)
    return Unauthenticated("join token expired " + std::to_string(now_unix - c.expiry_unix) + " s ago");
  return c;
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Status ApplyCurve(zmq::socket_t& socket, const CurveSocket& curve, bool server) {
  if (!curve.enabled()) return Status::Ok();
  GD_RETURN_IF_ERROR(RequireCurve());
  if (!IsCurveKey(curve.keys.public_key) || !IsCurveKey(curve.keys.secret_key))
    return InvalidArgument("malformed CURVE keypair (expected 40 Z85 characters each)");
  try {
    socket.set(zmq::sockopt::curve_secretkey, curve.keys.secret_key);
    socket.set(zmq::sockopt::curve_publickey, curve.keys.public_key);
    if (server) {
      socket.set(zmq::sockopt::curve_server, 1);
      socket.set(zmq::sockopt::zap_domain, kZapDomain);
    } else {
      if (!IsCurveKey(curve.server_key))
        return InvalidArgument("malformed CURVE server key '" + curve.server_key + "' (expected 40 Z85 characters)");
      socket.set(zmq::sockopt::curve_serverkey, curve.server_key);
    }
  } catch (const zmq::error_t& e) {
    return Internal(std::string("cannot set CURVE options: ") + e.what());
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------

ZapHandler::ZapHandler(zmq::context_t& ctx, bool admit_any)
    : ctx_(ctx), admit_any_(admit_any), socket_(ctx, zmq::socket_type::rep) {
  socket_.set(zmq::sockopt::linger, 0);
}

ZapHandler::~ZapHandler() { Stop(); }

Status ZapHandler::Start() {
  try {
    RetryInterrupted([&] { socket_.bind("inproc://zeromq.zap.01"); });
  } catch (const zmq::error_t& e) {
    return FailedPrecondition(std::string("cannot start the ZAP handler (one per ZeroMQ context): ") + e.what());
  }
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void ZapHandler::Stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  thread_.join();
}

void ZapHandler::SetAllowed(const std::vector<std::string>& keys) {
  std::set<std::string> next;
  for (const auto& k : keys)
    if (IsCurveKey(k)) next.insert(k);
  MutexLock lock(mu_);
  allowed_ = std::move(next);
}

bool ZapHandler::Allowed(const std::string& key) const {
  MutexLock lock(mu_);
  return allowed_.count(key) > 0;
}

std::string DescribeHandshakeFailure(uint16_t event, uint32_t value) {
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
    return "the handshake failed without detail (a peer that hung up or fell silent mid-handshake, such as a plaintext "
           "one)";
  switch (value) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
      return "the peer does not speak CURVE (a plaintext peer)";
    case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
      return "the peer's CURVE handshake does not decrypt (it expects another server key)";
    default: {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "ZeroMQ protocol error 0x%08x", value);
      return buf;
    }
  }
}

void ZapHandler::LogRefusal(const std::string& line) {
  uint64_t skipped = 0;
  if (!lines_.Due(RealClock::Get()->Now(), &skipped)) return;
  GD_LOG(WARNING) << line
                  << (skipped
                          ? " (and " + std::to_string(skipped) + " more refused connections since the last such line)"
                          : std::string());
}

// ZAP (ZeroMQ RFC 27): a request is version, request id, domain, address,
// routing id, mechanism, credentials...; the reply is version, request id,
// status code, status text, user id, metadata. The user id we return is the
// client's Z85 public key; ZeroMQ attaches it to every message of that
// connection as the "User-Id" property (transport::Message::peer_key).
void ZapHandler::AnswerZap() {
  std::vector<zmq::message_t> parts;
  while (true) {
    zmq::message_t part;
    if (!socket_.recv(part, zmq::recv_flags::none)) break;
    bool more = part.more();
    parts.push_back(std::move(part));
    if (!more) break;
  }
  std::string version = parts.size() > 0 ? parts[0].to_string() : "";
  std::string request_id = parts.size() > 1 ? parts[1].to_string() : "";
  std::string domain = parts.size() > 2 ? parts[2].to_string() : "";
  std::string mechanism = parts.size() > 5 ? parts[5].to_string() : "";
  std::string key;
  if (mechanism == "CURVE" && parts.size() > 6 && parts[6].size() == 32) {
    char z85[41];
    if (zmq_z85_encode(z85, static_cast<const uint8_t*>(parts[6].data()), 32)) key = z85;
  }
  bool ok = version == "1.0" && domain == kZapDomain && !key.empty() && (admit_any_ || Allowed(key));
  // Logged first: whoever sees the count rise finds its line written.
  if (!ok)
    LogRefusal("refused a connection from " + (parts.size() > 3 ? parts[3].to_string() : std::string("?")) + " (" +
               (key.empty() ? mechanism + " without a CURVE key" : "CURVE key " + key + " not authorized") + ")");
  (ok ? admitted_ : refused_)++;
  std::vector<std::string> reply = {"1.0",         request_id, ok ? "200" : "400", ok ? "OK" : "not authorized",
                                    ok ? key : "", ""};
  for (size_t i = 0; i < reply.size(); ++i)
    socket_.send(zmq::buffer(reply[i]), i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

void ZapHandler::Loop() {
  try {
    while (!stop_.load()) {
      zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 1, std::chrono::milliseconds(50));
      } catch (const zmq::error_t&) {
        continue;  // EINTR
      }
      if (items[0].revents & ZMQ_POLLIN) AnswerZap();
    }
  } catch (const std::exception& e) {
    // Without a handler ZeroMQ completes CURVE handshakes unauthenticated;
    // receivers then see no User-Id and refuse every message (message.h).
    GD_LOG(ERROR) << "ZAP handler stopped: " << e.what() << "; secured sockets of this process refuse all requests now";
  }
  socket_.close();
}

}  // namespace geodesic::transport
