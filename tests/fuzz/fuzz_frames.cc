// libFuzzer target: the framing checks every receiver runs first
// (transport::DecodeFrames, used by transport::Socket::Receive). Input: a flags byte
// (1: ROUTER, so the first part is the routing id; 2: any job), a limit in
// KiB (2 bytes), then one message (fuzz_input.h). A message that passes must
// satisfy every framing rule; one that fails is InvalidArgument with a
// message. Run by scripts/fuzz.sh.
#include "tests/fuzz/fuzz_input.h"
#include "transport/message.h"

using namespace geodesic;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::QuietLogs();
  fuzz::Reader in(data, size);
  const uint8_t flags = in.Byte();
  transport::SocketOptions options;
  options.job = (flags & 2) ? "" : "job";
  options.max_message_bytes = int64_t{in.U16()} << 10;
  const bool router = flags & 1;
  std::vector<zmq::message_t> parts = in.Parts();
  const size_t count = parts.size();
  transport::Incoming got = transport::DecodeFrames(std::move(parts), router, options);
  fuzz::CheckRefusal(got.status, "DecodeFrames");
  if (!got.status.ok()) {
    if (got.status.code() != Code::kInvalidArgument) fuzz::Fail("framing refusal is not InvalidArgument", got.status);
    return 0;
  }
  const transport::Message& m = got.message;
  const size_t first = router ? 1 : 0;
  if (m.header.protocol() != transport::kProtocolVersion) fuzz::Fail("accepted another protocol");
  if (!options.job.empty() && m.header.job() != options.job) fuzz::Fail("accepted another job");
  if (m.header.body_case() == wire::Header::BODY_NOT_SET) fuzz::Fail("accepted a header without a body");
  if (m.frames.size() != m.header.payload_frames() || m.frames.size() + first + 1 != count)
    fuzz::Fail("payload frames differ from the header's count");
  if (static_cast<int64_t>(m.wire_bytes) > options.max_message_bytes) fuzz::Fail("accepted an oversized message");
  std::vector<float> scratch;
  for (size_t i = 0; i < m.frames.size(); ++i) {
    if (m.frames[i].size() % sizeof(float)) continue;
    const float* v = m.FrameFloats(i, &scratch);
    volatile float sink = 0;
    for (size_t k = 0; k < m.frames[i].size() / sizeof(float); ++k) sink = sink + v[k];  // ASan checks the reads
  }
  (void)transport::BodyName(m.header);
  return 0;
}
