#include "bench/bench.h"
namespace geodesic::bench {
Status RunTransportBench(const BenchOptions&, const std::atomic<bool>*) { return Internal("todo"); }
Status RunPsOverheadBench(const BenchOptions&, const std::atomic<bool>*) { return Internal("todo"); }
Status RunZmqSink(const BenchOptions&, const std::atomic<bool>*) { return Internal("todo"); }
}
