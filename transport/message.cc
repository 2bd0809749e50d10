#include "transport/message.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <chrono>

#include <cctype>
#include <cstring>
#include <string_view>

#include "common/log.h"
#include "transport/interrupted.h"
#include "transport/routes.h"

namespace geodesic::transport {
namespace {

void ReleaseOwner(void* /*data*/, void* hint) { delete static_cast<std::shared_ptr<const void>*>(hint); }

}  // namespace

Payload CopyPayload(const void* data, size_t size) {
  auto buf = std::shared_ptr<char[]>(new char[size > 0 ? size : 1]);
  if (size) std::memcpy(buf.get(), data, size);
  Payload p;
  p.data = buf.get();
  p.size = size;
  p.owner = std::shared_ptr<const void>(buf, buf.get());
  return p;
}

const float* Message::FrameFloats(size_t i, std::vector<float>* scratch) const {
  const zmq::message_t& f = frames[i];
  if (reinterpret_cast<uintptr_t>(f.data()) % alignof(float) == 0) return static_cast<const float*>(f.data());
  scratch->resize(f.size() / sizeof(float));
  std::memcpy(scratch->data(), f.data(), scratch->size() * sizeof(float));
  return scratch->data();
}

namespace {

// HOST of tcp://HOST:PORT when it is a name (not an address, not *), else "".
std::string NameInEndpoint(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (endpoint.rfind("tcp://", 0) != 0 || colon == std::string::npos || colon <= 6) return "";
  const std::string host = endpoint.substr(6, colon - 6);
  in_addr v4;
  in6_addr v6;
  if (host == "*" || host.front() == '[' || ::inet_pton(AF_INET, host.c_str(), &v4) == 1 ||
      ::inet_pton(AF_INET6, host.c_str(), &v6) == 1)
    return "";
  return host;
}

// The first IPv4 address of `host` (ZeroMQ sockets here are IPv4), or why not.
StatusOr<std::string> ResolveIpv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0)
    return NotFound("does not resolve: " + std::string(::gai_strerror(rc)));
  char text[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text, sizeof(text));
  ::freeaddrinfo(found);
  return std::string(text);
}

}  // namespace

Socket::Socket(zmq::context_t& ctx, zmq::socket_type type, SocketOptions options, TrafficCounters* counters)
    : socket_(ctx, type),
      is_router_(type == zmq::socket_type::router),
      options_(std::move(options)),
      counters_(counters) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.set(zmq::sockopt::sndtimeo, options_.send_timeout_ms);
  socket_.set(zmq::sockopt::sndhwm, options_.high_water_mark);
  socket_.set(zmq::sockopt::rcvhwm, options_.high_water_mark);
  socket_.set(zmq::sockopt::maxmsgsize, options_.max_message_bytes);
  if (is_router_) socket_.set(zmq::sockopt::router_mandatory, 1);
  setup_ = ApplyCurve(socket_, options_.curve, is_router_);
}

Status Socket::Bind(const std::string& endpoint) {
  GD_RETURN_IF_ERROR(setup_);
  // ZeroMQ binds addresses and interface names, not host names: a name
  // (a region's `host`, a pod's DNS name) is resolved here, once; one that
  // does not resolve is tried as an interface name.
  std::string bind = endpoint;
  StatusOr<std::string> ip = NotFound("");
  if (const std::string name = NameInEndpoint(endpoint); !name.empty() && (ip = ResolveIpv4(name)).ok())
    bind = "tcp://" + *ip + endpoint.substr(endpoint.rfind(':'));
  try {
    RetryInterrupted([&] { socket_.bind(bind); });
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    const std::string why = ip.status().message().empty() ? "" : " (the host " + ip.status().message() + ")";
    return Unavailable("cannot bind " + endpoint + ": " + e.what() + why);
  }
  return Status::Ok();
}

Status Socket::Connect(const std::string& endpoint) {
  GD_RETURN_IF_ERROR(setup_);
  try {
    // The peer stays addressed by its own endpoint (logs, shard map); the
    // bytes may go through an emulated link (wan/routes.h).
    const std::string route = RouteFor(endpoint);
    RetryInterrupted([&] { socket_.connect(route); });
    endpoint_ = endpoint;
  } catch (const zmq::error_t& e) {
    return InvalidArgument("cannot connect to " + endpoint + ": " + e.what());
  }
  return Status::Ok();
}

Status Socket::Send(wire::Header header, const std::vector<Payload>& payloads, const std::string& peer) {
  header.set_protocol(kProtocolVersion);
  header.set_job(options_.job);
  header.set_sender_role(options_.role);
  header.set_sender_id(options_.id);
  header.set_payload_frames(static_cast<uint32_t>(payloads.size()));
  size_t header_size = header.ByteSizeLong();
  zmq::message_t head(header_size);
  if (!header.SerializeToArray(head.data(), static_cast<int>(header_size)))
    return Internal("cannot serialize " + BodyName(header) + " header");

  size_t total = header_size;
  try {
    if (is_router_) {
      if (peer.empty()) return Internal("send on a ROUTER socket needs a peer");
      zmq::message_t id(peer.data(), peer.size());
      if (!SendPart(id, zmq::send_flags::sndmore)) return QueueFull(header);
    }
    auto more = payloads.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore;
    if (!SendPart(head, more)) return QueueFull(header);
    for (size_t i = 0; i < payloads.size(); ++i) {
      const Payload& p = payloads[i];
      zmq::message_t frame;
      if (p.owner && p.size > 0) {
        auto* hint = new std::shared_ptr<const void>(p.owner);
        frame.rebuild(const_cast<void*>(p.data), p.size, &ReleaseOwner, hint);
      } else {
        frame.rebuild(p.data, p.size);
      }
      total += p.size;
      auto flags = i + 1 < payloads.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      // Once the first frame is queued the rest cannot block (ZeroMQ queues
      // whole multipart messages), so a failure here is a broken socket.
      if (!SendPart(frame, flags)) {
        counters_->send_failures++;
        return Unavailable("send of payload frame timed out");
      }
    }
  } catch (const zmq::error_t& e) {
    counters_->send_failures++;
    if (e.num() == EHOSTUNREACH) return Unavailable("peer of " + BodyName(header) + " is gone");
    return Unavailable(std::string("send of ") + BodyName(header) + " failed: " + e.what());
  }
  counters_->bytes_sent += total;
  counters_->messages_sent++;
  if (options_.also_count) options_.also_count->bytes_sent += total, options_.also_count->messages_sent++;
  return Status::Ok();
}

// ZeroMQ calls fail with EINTR when a signal arrives while they wait (the
// SIGUSR1 and SIGUSR2 that `geodesic checkpoint` and `geodesic wan replan`
// send, SIGCHLD in the launcher, libFuzzer's timer). Nothing was sent then,
// so the frame is sent again, until the socket's own send timeout has
// passed in all (then it is a timeout, as without the signal).
std::optional<size_t> Socket::SendPart(zmq::message_t& part, zmq::send_flags flags) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    try {
      return socket_.send(part, flags);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
      if (options_.send_timeout_ms >= 0 &&
          std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(options_.send_timeout_ms))
        return std::nullopt;
    }
  }
}

// The frames after a message's first are already queued (ZeroMQ delivers
// whole messages), so a receive interrupted by a signal is simply made again;
// giving up there would cut the message and read its rest as the next one.
zmq::recv_result_t Socket::ReceivePart(zmq::message_t& part, zmq::recv_flags flags) {
  for (;;) {
    try {
      return socket_.recv(part, flags);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

Status Socket::QueueFull(const wire::Header& header) {
  counters_->send_failures++;
  if (options_.send_timeout_ms == kNeverBlock) {
    counters_->sends_dropped++;
    return Unavailable("send of " + BodyName(header) + " dropped: the peer's queue is full (it does not read)");
  }
  return Unavailable("send of " + BodyName(header) + " to " + endpoint_ + " timed out");
}

std::optional<Incoming> Socket::Receive() {
  std::vector<zmq::message_t> parts;
  try {
    while (true) {
      zmq::message_t part;
      auto got = ReceivePart(part, parts.empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
      if (!got) {
        if (parts.empty()) return std::nullopt;
        break;
      }
      bool more = part.more();
      parts.push_back(std::move(part));
      if (!more) break;
    }
  } catch (const zmq::error_t& e) {
    if (parts.empty()) return std::nullopt;
    Incoming in;
    in.status = Unavailable(std::string("receive failed: ") + e.what());
    in.refusal = wire::REFUSAL_MALFORMED;
    return in;
  }

  Incoming in = DecodeFrames(std::move(parts), is_router_, options_);
  counters_->bytes_received += in.message.wire_bytes;
  counters_->messages_received++;
  if (options_.also_count)
    options_.also_count->bytes_received += in.message.wire_bytes, options_.also_count->messages_received++;
  if (!in.status.ok()) counters_->messages_refused++;
  return in;
}

Incoming DecodeFrames(std::vector<zmq::message_t> parts, bool router, const SocketOptions& options) {
  Incoming in;
  Message& m = in.message;
  size_t first = 0;
  if (router && !parts.empty()) {
    m.peer = parts[0].to_string();
    first = 1;
  }
  for (size_t i = first; i < parts.size(); ++i) m.wire_bytes += parts[i].size();

  auto refuse = [&](Status s, wire::Refusal why = wire::REFUSAL_MALFORMED) {
    in.status = std::move(s);
    in.refusal = why;
    return std::move(in);
  };
  if (parts.size() <= first) return refuse(InvalidArgument("malformed message: no header frame"));
  if (static_cast<int64_t>(m.wire_bytes) > options.max_message_bytes)
    return refuse(InvalidArgument("message of " + std::to_string(m.wire_bytes) + " bytes exceeds the limit of " +
                                  std::to_string(options.max_message_bytes)));
  zmq::message_t& head = parts[first];
  if (router) {
    // Frames read from a socket carry it; frames made from bytes do not (null).
    const char* address = zmq_msg_gets(head.handle(), "Peer-Address");
    if (address) m.peer_address = address;
  }
  if (options.curve.enabled() && router) {
    // The key the peer proved in its CurveZMQ handshake (set by our ZAP handler).
    const char* user = zmq_msg_gets(head.handle(), "User-Id");
    if (user) m.peer_key = user;
  }
  if (head.size() > static_cast<size_t>(INT32_MAX) ||
      !m.header.ParseFromArray(head.data(), static_cast<int>(head.size())))
    return refuse(InvalidArgument("malformed header frame (" + std::to_string(head.size()) + " bytes)"));
  if (m.header.protocol() != kProtocolVersion)
    return refuse(InvalidArgument("protocol version " + std::to_string(m.header.protocol()) + " is not ours (" +
                                  std::to_string(kProtocolVersion) + ")"));
  if (!options.job.empty() && m.header.job() != options.job)
    return refuse(InvalidArgument("message for job '" + m.header.job() + "', this is job '" + options.job + "'"));
  size_t payload_frames = parts.size() - first - 1;
  if (m.header.payload_frames() != payload_frames)
    return refuse(InvalidArgument("header declares " + std::to_string(m.header.payload_frames()) + " payload frames, " +
                                  std::to_string(payload_frames) + " arrived"));
  if (m.header.body_case() == wire::Header::BODY_NOT_SET)
    return refuse(InvalidArgument("unknown message type (no known body in the header)"), wire::REFUSAL_UNKNOWN_TYPE);
  m.frames.reserve(payload_frames);
  for (size_t i = first + 1; i < parts.size(); ++i) m.frames.push_back(std::move(parts[i]));
  return in;
}

bool Socket::WaitReadable(int timeout_ms) {
  zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  try {
    zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
  } catch (const zmq::error_t&) {
    return false;  // EINTR: a signal arrived; the caller re-checks its stop flag
  }
  return item.revents & ZMQ_POLLIN;
}

wire::ErrorCode ToWire(Code code) { return static_cast<wire::ErrorCode>(static_cast<int>(code)); }
Code FromWire(wire::ErrorCode code) {
  int c = static_cast<int>(code);
  if (c < 0 || c > static_cast<int>(Code::kPermissionDenied)) return Code::kInternal;
  return static_cast<Code>(c);
}

std::string RefusalName(wire::Refusal refusal) {
  static constexpr std::string_view kPrefix = "REFUSAL_";
  std::string name = wire::Refusal_Name(refusal);
  if (name.empty()) return "unknown";
  if (name.starts_with(kPrefix)) name.erase(0, kPrefix.size());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::string PeerName(const Message& m) {
  static constexpr char kHex[] = "0123456789abcdef";
  const wire::Role role = m.header.sender_role();
  std::string name = wire::Role_Name(role);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name.empty()) name = "role " + std::to_string(static_cast<int>(role));
  if (role == wire::ROLE_UNSPECIFIED)
    name = "unnamed peer";
  else
    name += " " + std::to_string(m.header.sender_id());
  if (m.peer.empty()) return name;
  name += " (peer ";
  for (size_t i = 0; i < m.peer.size() && i < 16; ++i) {
    const auto b = static_cast<unsigned char>(m.peer[i]);
    name += kHex[b >> 4];
    name += kHex[b & 15];
  }
  if (!m.peer_address.empty()) name += " at " + m.peer_address;
  return name + ")";
}

std::string BodyName(const wire::Header& header) {
  const auto* field = wire::Header::descriptor()->FindFieldByNumber(header.body_case());
  return field ? field->name() : "unknown";
}

std::string DescribeEndpointHost(const std::string& endpoint) {
  const std::string routed = RouteFor(endpoint);  // where Socket::Connect really goes
  const std::string host = NameInEndpoint(routed);
  if (host.empty()) return "";
  StatusOr<std::string> ip = ResolveIpv4(host);
  return " (" + (routed == endpoint ? std::string() : "routed to " + routed + "; ") + host +
         (ip.ok() ? " resolves to " + *ip : " " + ip.status().message()) + ")";
}

}  // namespace geodesic::transport
