// Framed messages over ZeroMQ: one protobuf Header frame plus raw payload
// frames (see proto/geodesic.proto for the framing and validation rules).
//
// Socket wraps one zmq::socket_t. It stamps outgoing headers with the
// protocol version, job and sender, sends payloads zero-copy (the bytes stay
// owned by the Payload's `owner` until ZeroMQ's I/O thread has sent them),
// and checks the framing of every incoming message before handing it out. A
// Socket, like the ZeroMQ socket inside it, belongs to one thread; the
// TrafficCounters it updates are atomic and may be shared and read anywhere.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/status.h"
#include "proto/geodesic.pb.h"
#include "transport/security.h"

namespace geodesic::transport {

inline constexpr uint32_t kProtocolVersion = 2;  // 2: ErrorReply.reason became the Refusal enum
inline constexpr int kNeverBlock = 0;            // SocketOptions::send_timeout_ms of loops that serve many peers

// Bytes for one payload frame, kept alive by `owner` until sent.
struct Payload {
  const void* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;  // null: the bytes are copied at send time
};

// A payload that owns a private copy of `size` bytes at `data`.
Payload CopyPayload(const void* data, size_t size);

struct Message {
  Message() = default;
  Message(Message&&) = default;
  Message& operator=(Message&&) = default;

  std::string peer;  // ROUTER sockets: the sender's routing id; empty on DEALER
  // The sender's IP address as ZeroMQ saw it on the connection ("" if unknown).
  std::string peer_address;
  // CURVE server sockets: the sender's public key (Z85) as the ZAP handler
  // admitted it; empty on plaintext sockets and if no handler vouched for it.
  std::string peer_key;
  wire::Header header;
  std::vector<zmq::message_t> frames;  // payload frames, in header order
  size_t wire_bytes = 0;               // header + payload bytes as received

  // Frame `i` as floats; the frame size must be a multiple of 4 (callers
  // validate sizes first). ZeroMQ does not promise alignment, so this copies
  // when the frame is misaligned.
  const float* FrameFloats(size_t i, std::vector<float>* scratch) const;
};

// What arrived: a valid message (`status` OK), or one refused by the framing
// checks, with as much of it as could be read (for an ErrorReply) and the
// refusal to answer with (REFUSAL_UNKNOWN_TYPE for a body this version does
// not know, REFUSAL_MALFORMED for everything else).
struct Incoming {
  Status status;
  wire::Refusal refusal = wire::REFUSAL_UNSPECIFIED;  // set when status is not OK
  Message message;
};

struct TrafficCounters {
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> messages_sent{0};
  std::atomic<uint64_t> messages_received{0};
  std::atomic<uint64_t> messages_refused{0};  // failed framing or handler validation
  std::atomic<uint64_t> send_failures{0};
  // Sends given up at once because the peer's queue was full (it does not
  // read): a subset of send_failures, on sockets that never block.
  std::atomic<uint64_t> sends_dropped{0};
};

struct SocketOptions {
  std::string job;  // stamped on sends; receives must match (empty: any)
  wire::Role role = wire::ROLE_UNSPECIFIED;
  int32_t id = -1;
  int64_t max_message_bytes = 256 << 20;  // larger inbound messages are refused unread
  // A send that cannot queue by then fails as Unavailable. 0: never block;
  // a peer whose queue is full (it does not read) loses the message, which
  // is counted in sends_dropped. Every socket an event loop serving several
  // peers sends on uses 0 (kNeverBlock), so that no one peer can stall it;
  // what must arrive is kept in an Outbox and resent.
  int send_timeout_ms = 5000;
  int high_water_mark = 10000;  // messages queued per peer before sends block or drop
  // CurveZMQ (security.mode curve): a ROUTER becomes a CURVE server, a
  // DEALER a CURVE client of `curve.server_key`. Default: plaintext.
  CurveSocket curve = {};
  // A second tally of what this socket sends and receives (e.g. per peer);
  // must outlive the socket.
  TrafficCounters* also_count = nullptr;
};

class Socket {
 public:
  Socket(zmq::context_t& ctx, zmq::socket_type type, SocketOptions options, TrafficCounters* counters);

  // Binds; "tcp://127.0.0.1:*" picks a free port, see endpoint().
  Status Bind(const std::string& endpoint);
  Status Connect(const std::string& endpoint);
  const std::string& endpoint() const { return endpoint_; }

  // Stamps and sends `header` followed by `payloads`. `peer` is required on
  // ROUTER sockets and ignored elsewhere. Unavailable if the peer is gone or
  // its queue stays full past send_timeout_ms (at once with kNeverBlock).
  Status Send(wire::Header header, const std::vector<Payload>& payloads, const std::string& peer = "");

  // Takes one waiting message without blocking; nullopt when none waits.
  std::optional<Incoming> Receive();

  // Waits up to `timeout_ms` for a message to be readable.
  bool WaitReadable(int timeout_ms);

  zmq::socket_t& raw() { return socket_; }
  const SocketOptions& options() const { return options_; }
  TrafficCounters* counters() const { return counters_; }

 private:
  zmq::socket_t socket_;
  bool is_router_;
  SocketOptions options_;
  TrafficCounters* counters_;
  std::string endpoint_;
  Status setup_;  // a failure applying the options, reported by Bind/Connect

  // A send that could not queue (counted; dropped with kNeverBlock).
  Status QueueFull(const wire::Header& header);
  // send/recv of one frame, made again when a signal interrupts them (EINTR).
  std::optional<size_t> SendPart(zmq::message_t& part, zmq::send_flags flags);
  zmq::recv_result_t ReceivePart(zmq::message_t& part, zmq::recv_flags flags);
};

// The framing checks of Socket::Receive, on bytes (no socket; the fuzz
// target tests/fuzz/fuzz_frames.cc calls it directly). `parts` is one
// multipart message as read, the routing id first when `router`. Refuses
// (status InvalidArgument, with whatever could be read, e.g. the header for
// an ErrorReply): no header frame, more than options.max_message_bytes
// (ZeroMQ's ZMQ_MAXMSGSIZE refuses those before reading; this is the same
// limit for the whole frame set), a header that does not parse, another
// protocol version or job, a payload_frames count that differs from the
// frames that came, and a header without a known body.
Incoming DecodeFrames(std::vector<zmq::message_t> parts, bool router, const SocketOptions& options);

wire::ErrorCode ToWire(Code code);
Code FromWire(wire::ErrorCode code);

// A refusal's name as shards count it in their stats: the enum value's
// name without "REFUSAL_", lower case (REFUSAL_NOT_BACKUP: "not_backup").
std::string RefusalName(wire::Refusal refusal);

// Short name of a body, e.g. "push_request", for logs.
std::string BodyName(const wire::Header& header);

// Who sent `m`, for logs: the role and id it claims, then the connection's
// routing id (hex) and address where the socket knows them, e.g.
// "worker 3 (peer 0080000001 at 127.0.0.1)". The claim is unchecked.
std::string PeerName(const Message& m);

// For a wait on a peer at `endpoint` (tcp://HOST:PORT): where HOST is a
// name, what it resolves to now, e.g. " (node-3.example resolves to
// 10.0.0.3)" or " (node-3.example does not resolve: Name or service not
// known)"; "" for an address. A routed endpoint (transport/routes.h) is
// described by its route: " (routed to tcp://wan:7500; wan resolves to
// 10.89.1.2)". ZeroMQ resolves a name again at every
// reconnect, so a name that appears later (a pod's DNS record) is found
// without a restart; this only says what the wait is on. Blocks for one
// lookup: call it when reporting a wait, not per message.
std::string DescribeEndpointHost(const std::string& endpoint);

}  // namespace geodesic::transport
