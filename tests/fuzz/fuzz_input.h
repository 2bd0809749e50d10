// What the message fuzz targets (fuzz_*.cc in this folder) share: the
// input format and the failure report. An input is a sequence of records,
//   record  := kind (1 byte) | body
//   message := part count (1 byte, 1..6 used) | per part: length (2 bytes,
//              little-endian, cut to what is left) | bytes
// so one input drives a receiver through several messages (an init, then
// pushes, then pulls), and seeds.cc writes valid conversations to start from.
// A target aborts (which libFuzzer reports as a crash) when a receiver
// breaks its contract.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/log.h"
#include "common/status.h"
#include "transport/protobuf_log.h"

namespace geodesic::fuzz {

[[noreturn]] inline void Fail(const std::string& what, const Status& s = Status::Ok()) {
  std::fprintf(stderr, "fuzz invariant violated: %s (%s)\n", what.c_str(), s.ToString().c_str());
  std::abort();
}

// Refusals are values with a code and a message, never anything else.
inline void CheckRefusal(const Status& s, const char* where) {
  if (s.ok()) return;
  if (s.message().empty()) Fail(std::string(where) + ": a refusal without a message", s);
  if (s.code() == Code::kInternal) Fail(std::string(where) + ": an Internal error for bad input", s);
}

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool done() const { return p_ >= end_; }
  uint8_t Byte() { return p_ < end_ ? *p_++ : 0; }
  uint16_t U16() { return static_cast<uint16_t>(Byte() | Byte() << 8); }
  std::vector<uint8_t> Bytes(size_t n) {
    n = std::min<size_t>(n, end_ - p_);
    std::vector<uint8_t> out(p_, p_ + n);
    p_ += n;
    return out;
  }
  // One message's frames (see above).
  std::vector<zmq::message_t> Parts() {
    std::vector<zmq::message_t> parts;
    const int n = 1 + Byte() % 6;
    for (int i = 0; i < n && !done(); ++i) {
      std::vector<uint8_t> b = Bytes(U16());
      parts.emplace_back(b.data(), b.size());
    }
    return parts;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// Receivers log every refusal; thousands a second would drown the report.
inline void QuietLogs() {
  SetMinLogLevel(LogLevel::kFatal);
  transport::RouteProtobufLogs();  // protobuf writes its own lines to stderr otherwise
}

}  // namespace geodesic::fuzz
