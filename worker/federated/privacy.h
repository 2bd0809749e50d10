// Differential privacy for federated rounds (DP-FedAvg, McMahan et al.,
// 2018): each client's update clipped to an L2 norm S, Gaussian noise of
// standard deviation z*S added to the round's sum, and a Rényi-DP
// accountant for the Poisson-subsampled Gaussian mechanism (Mironov, Talwar
// and Zhang, 2019) that turns (sampling rate q, noise multiplier z, rounds)
// into (ε, δ). docs/federated.md has the formulas. Pure functions; the
// noise follows the caller's key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace geodesic::federated {

// The L2 norm of n values, summed in double.
double L2Norm(const float* values, size_t n);

// Scales `delta` (n values) down to L2 norm `max_norm` if it is longer;
// returns the factor applied (1 when it was not). A non-finite norm zeroes
// the update and returns 0.
double ClipToNorm(float* delta, size_t n, double max_norm);

// Adds N(0, stddev²) to each value, drawn from the counter stream of `key`
// (common/draws.h: the same noise for a key on every platform).
void AddGaussianNoise(float* values, size_t n, double stddev, uint64_t key);

// Rényi DP of one round at integer order alpha >= 2: q = expected
// participants / clients (Poisson sampling), z = noise multiplier. Exact for
// integer orders: log(Σ_k C(α,k) (1-q)^(α-k) q^k exp((k²-k)/(2z²))) / (α-1).
double SubsampledGaussianRdp(double q, double z, int alpha);

struct DpGuarantee {
  double epsilon = 0;
  int order = 0;  // the Rényi order that gave the least ε
};

// The least ε over orders 2..256 after `rounds` rounds at δ, with the
// conversion of Canonne, Kamath and Steinke (2020):
//   ε = R(α) + log((α-1)/α) - (log δ + log α) / (α-1),  R = rounds * RDP(α).
DpGuarantee EpsilonAfter(double q, double z, int64_t rounds, double delta);

}  // namespace geodesic::federated
