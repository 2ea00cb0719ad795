// optimusnic_csim_host.h: host-side harness that turns a generated HLS kernel into the C simulation
// library of OptimusNIC (loaded from Python with ctypes by hls/csim.py). Not an HLS header: it is
// never synthesized and the kernel never includes it.
//
// The harness calls the generated top function unchanged, chunk by chunk, in place on the
// caller's buffers:
//   - chunks are whole multiples of 32 elements, so every 512-bit beat the kernel reads or writes
//     lies inside the caller's arrays (32 = elements of one bf16/fp16 beat = two fp32 beats);
//   - the elements before p's first 64-byte boundary (numpy buffers are only 16-byte aligned) and
//     the last (n - head) % 32 go through a padded scratch copy, which is where the kernel's own
//     tail handling (n not a multiple of the beat or of LANES) runs; so every beat of the main
//     part is one whole cache line;
//   - chunks are small (hls/csim.py passes 256 elements, 16 beats), which is how the dataflow
//     processes stream here: C simulation runs load_grad, compute and store_out one after another,
//     so per chunk the FIFOs hold 1 KiB each and stay in L1, and the kernel call costs nothing
//     beyond its loops (hls_stream.h keeps small FIFOs inside the stream objects);
//   - before each call the harness prefetches the next chunk's gradient and output lines: the
//     gradient is read by load_grad alone and the output written by store_out alone, so without
//     it each of those loops would wait on one memory stream at a time;
//   - chunks are split over threads (each chunk is independent), and each thread runs with
//     flush-to-zero and denormals-are-zero off and round-to-nearest-even, whatever the host
//     process set, so the arithmetic is IEEE-754 binary32 as design.md section 3 requires.
// Use: #include the kernel .cpp, then this header, then OPTIMUSNIC_CSIM_ENTRY(<top function>).
#ifndef OPTIMUSNIC_CSIM_HOST_H
#define OPTIMUSNIC_CSIM_HOST_H

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "ap_axi_sdata.h"
#include "hls_stream.h"

namespace optimusnic_csim {

constexpr std::uint64_t kGroup = 32;  // elements per chunk granule (one 16-bit beat, two fp32 beats)
constexpr int kScalars = 9;

// IEEE mode for the lifetime of the guard: no FTZ (bit 15), no DAZ (bit 6), round to nearest.
class IeeeMode {
 public:
  IeeeMode() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~0x8040u & ~0x6000u); }
  ~IeeeMode() { _mm_setcsr(saved_); }

 private:
  unsigned int saved_;
};

template <class Beat>
constexpr std::size_t element_bytes() {
  return sizeof(std::remove_cv_t<std::remove_reference_t<decltype(std::declval<Beat&>()[0])>>);
}

struct Buffers {
  const std::uint8_t* grad;
  std::uint8_t* p;
  std::uint8_t* m;
  std::uint8_t* v;
  std::uint8_t* out;
};

// Memory-source kernels: the gradient is an m_axi pointer.
template <class G, class P, class O>
unsigned long call(void (*kernel)(const G*, P*, P*, P*, O*, unsigned int, float, float, float, float, float, float,
                                  float, float, float),
                   const Buffers& b, std::uint64_t first, unsigned int n, const float* s, std::size_t* gbytes,
                   std::size_t* obytes) {
  constexpr std::size_t ge = element_bytes<G>(), pe = element_bytes<P>(), oe = element_bytes<O>();
  *gbytes = ge;
  *obytes = oe;
  const unsigned long before = hls::stream_underflows();
  kernel(reinterpret_cast<const G*>(b.grad + first * ge), reinterpret_cast<P*>(b.p + first * pe),
         reinterpret_cast<P*>(b.m + first * pe), reinterpret_cast<P*>(b.v + first * pe),
         reinterpret_cast<O*>(b.out + first * oe), n, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8]);
  return hls::stream_underflows() - before;
}

// Stream-source kernels: the gradient arrives as 512-bit AXI4-Stream beats with TLAST, which the
// harness builds from the gradient array exactly as the network kernel would send them.
template <class A, class P, class O>
unsigned long call(void (*kernel)(hls::stream<A>&, P*, P*, P*, O*, unsigned int, float, float, float, float, float,
                                  float, float, float, float),
                   const Buffers& b, std::uint64_t first, unsigned int n, const float* s, std::size_t* gbytes,
                   std::size_t* obytes) {
  constexpr std::size_t pe = element_bytes<P>(), oe = element_bytes<O>();
  *obytes = oe;
  const std::size_t ge = *gbytes;  // the stream type does not say it: the caller passes it in
  const std::uint64_t bytes = static_cast<std::uint64_t>(n) * ge;
  const std::uint64_t beats = (bytes + 63) / 64;
  const std::uint8_t* src = b.grad + first * ge;
  hls::stream<A> in;
  for (std::uint64_t i = 0; i < beats; ++i) {
    std::uint8_t raw[64] = {0};
    std::memcpy(raw, src + 64 * i, static_cast<std::size_t>(std::min<std::uint64_t>(64, bytes - 64 * i)));
    A beat;
    for (int w = 0; w < 8; ++w) {
      std::uint64_t word;
      std::memcpy(&word, raw + 8 * w, 8);
      beat.data.range(64 * w + 63, 64 * w) = word;
    }
    beat.keep = -1;
    beat.strb = -1;
    beat.last = i + 1 == beats;
    in.write(beat);
  }
  const unsigned long before = hls::stream_underflows();
  kernel(in, reinterpret_cast<P*>(b.p + first * pe), reinterpret_cast<P*>(b.m + first * pe),
         reinterpret_cast<P*>(b.v + first * pe), reinterpret_cast<O*>(b.out + first * oe), n, s[0], s[1], s[2], s[3],
         s[4], s[5], s[6], s[7], s[8]);
  // Beats the kernel left unread are as much a bug as beats it missed.
  return hls::stream_underflows() - before + in.size();
}

// Element bytes of the output array, from the kernel's signature (memory or stream source).
template <class G, class P, class O>
constexpr std::size_t out_bytes(void (*)(const G*, P*, P*, P*, O*, unsigned int, float, float, float, float, float,
                                         float, float, float, float)) {
  return element_bytes<O>();
}
template <class A, class P, class O>
constexpr std::size_t out_bytes(void (*)(hls::stream<A>&, P*, P*, P*, O*, unsigned int, float, float, float, float,
                                         float, float, float, float, float)) {
  return element_bytes<O>();
}

// Start loading the gradient lines and owning the output lines of elements [first, first + n)
// (hints only: they change no data and cannot fault).
inline void prefetch(const Buffers& b, std::uint64_t first, std::uint64_t n, std::size_t ge, std::size_t oe) {
  const char* g = reinterpret_cast<const char*>(b.grad + first * ge);
  for (std::uint64_t i = 0; i < n * ge; i += 64) _mm_prefetch(g + i, _MM_HINT_T0);
  std::uint8_t* o = b.out + first * oe;
  for (std::uint64_t i = 0; i < n * oe; i += 64) _m_prefetchw(o + i);
}

// Elements [first, first + count), count < kGroup, through padded scratch buffers: the kernel sees
// whole beats and runs its own tail handling (lanes past `count` keep their old state).
template <class K>
unsigned long scratch_call(K kernel, std::size_t grad_bytes, const Buffers& b, std::uint64_t first,
                           std::uint64_t count, const float* s) {
  IeeeMode mode;
  alignas(64) std::uint8_t g[kGroup * 4] = {0}, p[kGroup * 4] = {0}, m[kGroup * 4] = {0}, v[kGroup * 4] = {0},
                           o[kGroup * 4] = {0};
  std::size_t gb = grad_bytes, ob = 0;
  const std::uint64_t pe = 4;
  std::memcpy(g, b.grad + first * grad_bytes, count * grad_bytes);
  std::memcpy(p, b.p + first * pe, count * pe);
  std::memcpy(m, b.m + first * pe, count * pe);
  std::memcpy(v, b.v + first * pe, count * pe);
  const Buffers pad{g, p, m, v, o};
  const unsigned long errors = call(kernel, pad, 0, static_cast<unsigned int>(count), s, &gb, &ob);
  std::memcpy(b.p + first * pe, p, count * pe);
  std::memcpy(b.m + first * pe, m, count * pe);
  std::memcpy(b.v + first * pe, v, count * pe);
  std::memcpy(b.out + first * ob, o, count * ob);
  return errors;
}

template <class K>
long run(K kernel, std::size_t grad_bytes, const Buffers& b, std::uint64_t n, const std::uint32_t* bits, int threads,
         std::uint64_t chunk) {
  if (n >= (std::uint64_t{1} << 32) - kGroup) return -1;
  float s[kScalars];
  std::memcpy(s, bits, sizeof(s));
  chunk = std::max<std::uint64_t>(kGroup, chunk / kGroup * kGroup);
  // Head: numpy aligns its buffers to 16 bytes only, so a beat taken from element 0 would straddle
  // two cache lines (every 512-bit access split in two). The elements before p's first 64-byte
  // boundary go through the scratch path, so the kernel's beats are whole cache lines (of p, m, v
  // and whichever other arrays share p's alignment, as numpy's large arrays do).
  const std::uintptr_t misalign = reinterpret_cast<std::uintptr_t>(b.p) % 64;
  const std::uint64_t head = misalign % 4 ? 0 : std::min<std::uint64_t>(n, misalign ? (64 - misalign) / 4 : 0);
  const std::uint64_t groups = (n - head) / kGroup;
  const std::uint64_t main = head + groups * kGroup;  // [head, main) runs in place in whole groups
  threads = std::max(1, std::min(threads, 64));
  if (static_cast<std::uint64_t>(threads) > groups) threads = static_cast<int>(std::max<std::uint64_t>(1, groups));
  std::vector<long> errors(static_cast<std::size_t>(threads), 0);

  auto work = [&](int t) {
    IeeeMode mode;
    const std::uint64_t per = (groups + threads - 1) / threads * kGroup;
    const std::uint64_t begin = std::min(main, head + per * t), end = std::min(main, head + per * (t + 1));
    for (std::uint64_t c = begin; c < end; c += chunk) {
      std::size_t gb = grad_bytes, ob = 0;
      if (c + chunk < end) prefetch(b, c + chunk, std::min(chunk, end - c - chunk), grad_bytes, out_bytes(kernel));
      errors[t] += static_cast<long>(call(kernel, b, c, static_cast<unsigned int>(std::min(chunk, end - c)), s, &gb, &ob));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  long total = 0;
  for (long e : errors) total += e;

  if (head) total += static_cast<long>(scratch_call(kernel, grad_bytes, b, 0, head, s));
  if (n > main) total += static_cast<long>(scratch_call(kernel, grad_bytes, b, main, n - main, s));
  return total;
}

// One call of the kernel on the caller's buffers, no chunking or padding: the caller guarantees
// every buffer covers whole beats (the hardware contract). Used to test the kernel's tail lanes.
template <class K>
long direct(K kernel, std::size_t grad_bytes, const Buffers& b, std::uint64_t n, const std::uint32_t* bits) {
  if (n >= (std::uint64_t{1} << 32) - kGroup) return -1;
  float s[kScalars];
  std::memcpy(s, bits, sizeof(s));
  IeeeMode mode;
  std::size_t gb = grad_bytes, ob = 0;
  return static_cast<long>(call(kernel, b, 0, static_cast<unsigned int>(n), s, &gb, &ob));
}

}  // namespace optimusnic_csim

// The C ABI hls/csim.py loads. `scalars` are the 9 register bit patterns in register-map order;
// the return value is the number of stream underflows/leftovers (0 when the kernel is right),
// or -1 for an element count the 32-bit `n` register cannot hold.
#define OPTIMUSNIC_CSIM_ENTRY(KERNEL)                                                                          \
  extern "C" int optimusnic_csim_abi(void) { return 1; }                                                       \
  extern "C" long optimusnic_csim_run(const void* grad, void* p, void* m, void* v, void* out,                 \
                                      unsigned long long n, const unsigned int* scalars, int threads,           \
                                      unsigned long long chunk, unsigned long long grad_bytes) {                \
    const optimusnic_csim::Buffers b{static_cast<const std::uint8_t*>(grad), static_cast<std::uint8_t*>(p),    \
                                     static_cast<std::uint8_t*>(m), static_cast<std::uint8_t*>(v),             \
                                     static_cast<std::uint8_t*>(out)};                                         \
    return optimusnic_csim::run(&KERNEL, grad_bytes, b, n, scalars, threads, chunk);                           \
  }                                                                                                            \
  extern "C" long optimusnic_csim_direct(const void* grad, void* p, void* m, void* v, void* out,              \
                                         unsigned long long n, const unsigned int* scalars,                     \
                                         unsigned long long grad_bytes) {                                       \
    const optimusnic_csim::Buffers b{static_cast<const std::uint8_t*>(grad), static_cast<std::uint8_t*>(p),    \
                                     static_cast<std::uint8_t*>(m), static_cast<std::uint8_t*>(v),             \
                                     static_cast<std::uint8_t*>(out)};                                         \
    return optimusnic_csim::direct(&KERNEL, grad_bytes, b, n, scalars);                                        \
  }

#endif  // OPTIMUSNIC_CSIM_HOST_H
