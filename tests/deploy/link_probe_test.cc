// The launcher's start-up probe of a declared link (deploy/emulated_wan.h):
// about half a second of bulk transfer, within what a probe may send, so
// that a link declared faster than this machine moves bytes is still
// probed instead of failing its options' check.
#include <gtest/gtest.h>

#include "deploy/emulated_wan.h"
#include "wan/probe.h"

namespace geodesic::deploy {
namespace {

LinkSpec Link(double mbit) {
  LinkSpec l;
  l.from = "a";
  l.to = "b";
  l.bandwidth_mbit = mbit;
  return l;
}

TEST(LinkProbeTest, BulkBytesAreHalfASecondWithinTheProbesLimits) {
  EXPECT_EQ(LinkProbeOptions(Link(100)).bulk_bytes, 6250000) << "100 Mbit/s: half a second";
  EXPECT_EQ(LinkProbeOptions(Link(1)).bulk_bytes, 256 << 10) << "at least 256 KiB";
  for (double mbit : {1e4, 1e5, 1e7}) {
    const int64_t bytes = LinkProbeOptions(Link(mbit)).bulk_bytes;
    EXPECT_EQ(bytes, 64 << 20) << mbit << " Mbit/s";
    EXPECT_LE(bytes, wan::kMaxProbeBulkBytes);
  }
  EXPECT_EQ(LinkProbeOptions(Link(0)).bulk_bytes, wan::ProbeOptions{}.bulk_bytes) << "unlimited: the default";
}

}  // namespace
}  // namespace geodesic::deploy
