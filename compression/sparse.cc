// TOPK and RANDK: k (index, value) pairs, indices ascending as LEB128 gaps,
// then the k float32 values.
//
// Top-k never sorts the input. The 31 bits of |x| order the magnitudes, so
// a radix select finds the k-th largest: a histogram of the top 11 bits over
// the whole input names the bin holding the threshold, one more pass
// collects (in index order) every element in or above that bin, and two
// small histograms over the collected ones (10 bits each) pin the exact
// threshold and how many ties at it to keep. Two passes over memory; for a
// normal-ish gradient the collected set is a few times k.
//
// Random-k marks k distinct random indices in a bitmap (the complement for
// k > n/2, so drawing never slows down), then reads the bitmap in order.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "compression/internal/bits.h"
#include "compression/internal/codecs.h"

namespace geodesic::compression::internal {
namespace {

inline uint32_t AbsKey(const float* x, uint64_t i) { return FloatBits(x[i]) & 0x7fffffffu; }

// Scans a histogram from the top for the bin holding the `need`-th largest
// element; returns the bin and sets *need to how many to take inside it.
template <size_t N>
uint32_t FindBin(const std::array<uint32_t, N>& hist, uint64_t* need) {
  uint64_t above = 0;
  for (size_t b = N; b-- > 0;) {
    if (above + hist[b] >= *need) {
      *need -= above;
      return static_cast<uint32_t>(b);
    }
    above += hist[b];
  }
  return 0;  // unreachable when need <= total
}

// Histogram of key >> 20 (11 bits), four interleaved copies so that runs of
// equal bins do not serialize on one counter.
GD_TARGET_CLONES void TopHistogram(const float* x, uint64_t n, std::array<uint32_t, 2048>* out) {
  std::array<std::array<uint32_t, 2048>, 4> h{};  // 32 KiB of stack
  uint64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    ++h[0][AbsKey(x, i) >> 20];
    ++h[1][AbsKey(x, i + 1) >> 20];
    ++h[2][AbsKey(x, i + 2) >> 20];
    ++h[3][AbsKey(x, i + 3) >> 20];
  }
  for (; i < n; ++i) ++h[0][AbsKey(x, i) >> 20];
  for (size_t b = 0; b < 2048; ++b) (*out)[b] = h[0][b] + h[1][b] + h[2][b] + h[3][b];
}

// Every index whose key's top 11 bits are >= bin, in order (branch-free:
// each index is written, and the cursor advances only for the kept ones).
GD_TARGET_CLONES uint64_t Collect(const float* x, uint64_t n, uint32_t bin, uint32_t* cand) {
  uint64_t c = 0;
  for (uint64_t i = 0; i < n; ++i) {
    cand[c] = static_cast<uint32_t>(i);
    c += (AbsKey(x, i) >> 20) >= bin;
  }
  return c;
}

// Writes the gaps of idx[0, k) and then their values into out (sized to the
// bound beforehand); returns the payload size.
uint64_t WritePayload(const float* x, const uint32_t* idx, uint64_t k, uint8_t* out, float* sent) {
  uint8_t* w = out;
  uint64_t prev = 0;
  for (uint64_t j = 0; j < k; ++j) {
    w = PutVarint(w, idx[j] - prev);
    prev = idx[j];
  }
  for (uint64_t j = 0; j < k; ++j) StoreF32(w + 4 * j, x[idx[j]]);
  if (sent)
    for (uint64_t j = 0; j < k; ++j) sent[idx[j]] = x[idx[j]];
  return static_cast<uint64_t>(w - out) + 4 * k;
}

Status SparseError(const char* codec, const std::string& what) {
  return InvalidArgument(std::string(codec) + " payload: " + what);
}

}  // namespace

uint64_t SparseMaxBytes(uint64_t n, uint64_t k) { return k == 0 ? 0 : k * (4 + VarintLength(n - 1)); }

uint64_t EncodeTopK(const float* x, uint64_t n, uint64_t k, std::vector<uint32_t>* scratch, std::vector<uint8_t>* out,
                    float* sent) {
  out->clear();
  if (sent) std::fill(sent, sent + n, 0.0f);
  if (k == 0) return 0;
  std::vector<uint32_t>& cand = *scratch;
  uint64_t kept = 0;
  if (k >= n) {
    cand.resize(n);
    uint64_t non_finite = 0;
    for (uint64_t i = 0; i < n; ++i) {
      cand[i] = static_cast<uint32_t>(i);
      non_finite += NonFiniteBits(FloatBits(x[i]));
    }
    if (non_finite) return non_finite;
    kept = n;
  } else {
    std::array<uint32_t, 2048> h1;
    TopHistogram(x, n, &h1);
    uint64_t non_finite = 0;
    for (uint32_t b = 0x7f8; b < 2048; ++b) non_finite += h1[b];  // exponent all ones
    if (non_finite) return non_finite;
    uint64_t need = k;
    const uint32_t b1 = FindBin(h1, &need);
    uint64_t above = k - need;
    cand.resize(above + h1[b1] + 1);
    const uint64_t count = Collect(x, n, b1, cand.data());
    // Refine inside bin b1: bits 19..10, then 9..0.
    std::array<uint32_t, 1024> h2{}, h3{};
    for (uint64_t j = 0; j < count; ++j) {
      const uint32_t key = AbsKey(x, cand[j]);
      if ((key >> 20) == b1) ++h2[(key >> 10) & 1023];
    }
    const uint32_t b2 = FindBin(h2, &need);
    const uint32_t prefix = (b1 << 10) | b2;
    for (uint64_t j = 0; j < count; ++j) {
      const uint32_t key = AbsKey(x, cand[j]);
      if ((key >> 10) == prefix) ++h3[key & 1023];
    }
    const uint32_t b3 = FindBin(h3, &need);
    const uint32_t threshold = (prefix << 10) | b3;
    // Keep keys above the threshold and the first `need` equal to it;
    // compacting in place keeps the order.
    uint64_t ties = need;
    for (uint64_t j = 0; j < count; ++j) {
      const uint32_t key = AbsKey(x, cand[j]);
      const bool take = key > threshold || (key == threshold && ties > 0);
      ties -= key == threshold && take;
      cand[kept] = cand[j];
      kept += take;
    }
  }
  out->resize(SparseMaxBytes(n, kept));
  out->resize(WritePayload(x, cand.data(), kept, out->data(), sent));
  return 0;
}

uint64_t EncodeRandK(const float* x, uint64_t n, uint64_t k, uint64_t key, std::vector<uint32_t>* scratch,
                     std::vector<uint8_t>* out, float* sent) {
  out->clear();
  if (sent) std::fill(sent, sent + n, 0.0f);
  k = std::min(k, n);
  if (k == 0) return 0;
  // Mark m = min(k, n - k) indices; with the complement, at most half the
  // bitmap is ever set, so each draw succeeds with probability >= 1/2.
  const bool invert = k > n / 2;
  const uint64_t m = invert ? n - k : k;
  std::vector<uint32_t>& bitmap = *scratch;
  bitmap.assign((n + 31) / 32, 0);
  uint64_t state = key;
  for (uint64_t marked = 0; marked < m;) {
    state += 0x9e3779b97f4a7c15ull;
    const uint64_t i = static_cast<uint64_t>((static_cast<unsigned __int128>(Mix64(state)) * n) >> 64);
    const uint32_t bit = 1u << (i & 31);
    marked += (bitmap[i >> 5] & bit) == 0;
    bitmap[i >> 5] |= bit;
  }
  out->resize(SparseMaxBytes(n, k));
  uint8_t* w = out->data();
  uint64_t prev = 0, bad = 0;
  // Two scans of the bitmap: the gaps, then the values behind them.
  for (int pass = 0; pass < 2; ++pass) {
    uint8_t* values = w;
    uint64_t j = 0;
    for (uint64_t word = 0; word < bitmap.size(); ++word) {
      uint32_t bits = invert ? ~bitmap[word] : bitmap[word];
      if (word == bitmap.size() - 1 && n % 32) bits &= (1u << (n % 32)) - 1;
      while (bits) {
        const uint64_t i = word * 32 + static_cast<uint64_t>(__builtin_ctz(bits));
        bits &= bits - 1;
        if (pass == 0) {
          w = PutVarint(w, i - prev);
          prev = i;
        } else {
          StoreF32(values + 4 * j++, x[i]);
          bad += NonFiniteBits(FloatBits(x[i]));
          if (sent) sent[i] = x[i];
        }
      }
    }
    if (pass == 1) w = values + 4 * j;
  }
  out->resize(static_cast<uint64_t>(w - out->data()));
  return bad;
}

Status DecodeSparse(const char* codec, const uint8_t* p, uint64_t size, uint64_t n, uint64_t k, float* out, bool add) {
  if (size < 5 * k)
    return SparseError(codec, std::to_string(size) + " bytes cannot hold " + std::to_string(k) +
                                  " indices and values (at least " + std::to_string(5 * k) + ")");
  const uint64_t index_bytes = size - 4 * k;
  const uint8_t* values = p + index_bytes;
  // Pass 1 checks everything; pass 2 (which cannot fail) writes.
  uint64_t pos = 0, prev = 0;
  for (uint64_t j = 0; j < k; ++j) {
    uint64_t gap = 0;
    for (uint32_t shift = 0;; shift += 7) {
      if (pos == index_bytes)
        return SparseError(codec, "index " + std::to_string(j) + " runs past the index section (" +
                                      std::to_string(index_bytes) + " bytes)");
      const uint8_t byte = p[pos++];
      if (shift == 63 && byte > 1)
        return SparseError(codec, "index " + std::to_string(j) + ": varint overflows 64 bits");
      gap |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) {
        if (byte == 0 && shift > 0)
          return SparseError(codec, "index " + std::to_string(j) + ": varint has a redundant zero byte");
        break;
      }
    }
    if (j > 0 && gap == 0)
      return SparseError(codec, "index " + std::to_string(j) + " repeats index " + std::to_string(prev) +
                                    " (indices must be strictly increasing)");
    const uint64_t base = j == 0 ? 0 : prev;
    if (gap >= n - base)
      return SparseError(codec, "index " + std::to_string(j) + " is out of range: " +
                                    (gap > ~base ? std::string("overflows") : std::to_string(base + gap)) +
                                    " >= " + std::to_string(n) + " values");
    prev = base + gap;
    if (NonFiniteBits(FloatBits(LoadF32(values + 4 * j))))
      return SparseError(codec, "the value at index " + std::to_string(prev) + " is not finite");
  }
  if (pos != index_bytes)
    return SparseError(
        codec, std::to_string(index_bytes - pos) + " byte(s) left over after " + std::to_string(k) + " indices");
  if (!add) std::fill(out, out + n, 0.0f);
  pos = 0;
  prev = 0;
  for (uint64_t j = 0; j < k; ++j) {
    uint64_t gap = 0;
    for (uint32_t shift = 0;; shift += 7) {
      const uint8_t byte = p[pos++];
      gap |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) break;
    }
    prev = j == 0 ? gap : prev + gap;
    const float v = LoadF32(values + 4 * j);
    if (add)
      out[prev] += v;
    else
      out[prev] = v;
  }
  return Status::Ok();
}

}  // namespace geodesic::compression::internal
