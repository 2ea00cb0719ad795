// optimusnic_csim_host.h: host-side harness that turns a generated HLS kernel into the C simulation
// library of OptimusNIC (loaded from Python with ctypes by hls/csim.py). Not an HLS header: it is
// never synthesized and the kernel never includes it.
//
// The library takes what the card has: one buffer per m_axi port, in register-map order (a state
// stripe's _rd and _wr ports normally get the same buffer, as the host points both at one buffer),
// each holding its stripe in whole 64-byte beats (hls/layout.py). The harness calls the generated
// top function unchanged, chunk by chunk, in place on those buffers:
//   - the kernel's pointer, stream and scalar arguments are found from its signature (any number
//     of ports), so one harness serves every memory plan;
//   - a chunk starts at an element that is a multiple of `align` = 32 x lcm(stripes of every
//     array) (StripeCounts.beat_align()): there every stripe of every array is at the start of a
//     round, so the chunk is the same kernel call on each port's buffer advanced by
//     start / (elements per beat x stripes of its array) beats. The last chunk ends at n, where
//     the kernel's own tail handling (lanes past n keep their state) runs on the caller's buffers;
//   - chunks are small (hls/csim.py passes 256 elements, 16 beats, rounded to `align`), which is
//     how the dataflow processes stream here: C simulation runs them one after another, so per
//     chunk the FIFOs hold a few KiB and stay in L1 (hls_stream.h keeps small FIFOs inside the
//     stream objects);
//   - before each call the harness prefetches the next chunk's read-only and write-only lines
//     (gradient and output stripes): each of those is touched by one loop alone, which without
//     it would wait on one memory stream at a time;
//   - chunks are split over threads (each chunk is independent), and each thread runs with
//     flush-to-zero and denormals-are-zero off and round-to-nearest-even, whatever the host
//     process set, so the arithmetic is IEEE-754 binary32 as design.md section 3 requires;
//   - a stream read when empty, or left holding data when the kernel returns, is counted and
//     returned: either means two processes disagree on a beat count.
// Stream-source kernels get their gradient as 512-bit AXI4-Stream beats with TLAST, which the
// harness builds from a plain gradient array exactly as the network kernel would send them.
// Use: #include the kernel .cpp, then this header, then OPTIMUSNIC_CSIM_ENTRY(<top function>).
#ifndef OPTIMUSNIC_CSIM_HOST_H
#define OPTIMUSNIC_CSIM_HOST_H

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "ap_axi_sdata.h"
#include "hls_stream.h"

namespace optimusnic_csim {

constexpr int kScalars = 9;
constexpr std::uint64_t kMaxElements = (std::uint64_t{1} << 32) - 33;  // the 32-bit `n` register, 32 margin

// IEEE mode for the lifetime of the guard: no FTZ (bit 15), no DAZ (bit 6), round to nearest.
class IeeeMode {
 public:
  IeeeMode() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~0x8040u & ~0x6000u); }
  ~IeeeMode() { _mm_setcsr(saved_); }

 private:
  unsigned int saved_;
};

template <class T>
struct is_stream_ref : std::false_type {};
template <class T>
struct is_stream_ref<hls::stream<T>&> : std::true_type {};

// What the kernel's signature says: [stream&] pointer... unsigned int n, float x 9.
template <class... A>
struct Signature {
  static constexpr std::size_t kPointers = (std::size_t{0} + ... + (std::is_pointer<A>::value ? 1 : 0));
  static constexpr std::size_t kStreams = (std::size_t{0} + ... + (is_stream_ref<A>::value ? 1 : 0));
  static constexpr std::size_t kFloats = (std::size_t{0} + ... + (std::is_same<A, float>::value ? 1 : 0));
  static_assert(kStreams <= 1, "at most one AXI4-Stream argument (the gradient)");
  static_assert(kFloats == kScalars, "the kernel takes the 9 scalar registers of design.md section 3");
  static_assert(sizeof...(A) == kStreams + kPointers + 1 + kFloats, "arguments: [stream] pointers n scalars");
};

// One chunk's view of the kernel arguments.
struct Call {
  std::uint8_t* const* base;   // per port: the stripe buffer, already advanced to this chunk
  void* stream;                // the gradient stream (stream-source kernels)
  unsigned int n;              // elements in this chunk
  const float* scalars;
};

template <class A, std::size_t I, std::size_t Streams, std::size_t Pointers>
A argument(const Call& c) {
  if constexpr (is_stream_ref<A>::value) {
    return *static_cast<std::remove_reference_t<A>*>(c.stream);
  } else if constexpr (std::is_pointer<A>::value) {
    return reinterpret_cast<A>(c.base[I - Streams]);
  } else if constexpr (std::is_same<A, float>::value) {
    return c.scalars[I - Streams - Pointers - 1];
  } else {
    static_assert(std::is_same<A, unsigned int>::value, "the element count n is an unsigned int");
    return c.n;
  }
}

template <class... A, std::size_t... I>
void invoke(void (*kernel)(A...), const Call& c, std::index_sequence<I...>) {
  using S = Signature<A...>;
  kernel(argument<A, I, S::kStreams, S::kPointers>(c)...);
}

// The beat type of a stream-source kernel's gradient stream (its first argument), else void.
template <class... A>
struct StreamOf {
  using type = void;
};
template <class T, class... A>
struct StreamOf<hls::stream<T>&, A...> {
  using type = T;
};

struct Ports {
  std::uint8_t* const* buffers;        // one per pointer argument, register-map order
  const std::uint64_t* round_elements; // per port: elements one beat of every stripe of its array holds
  const std::uint8_t* grad;            // stream-source kernels: the gradient array
  std::uint64_t grad_bytes;            // element bytes of that gradient
  std::uint64_t nports;
};

// Advance to the chunk at element `first` (a multiple of every round_elements), and call.
template <class... A>
unsigned long call(void (*kernel)(A...), const Ports& p, std::uint64_t first, unsigned int n, const float* s) {
  using S = Signature<A...>;
  std::uint8_t* base[S::kPointers > 0 ? S::kPointers : 1];
  for (std::size_t i = 0; i < S::kPointers; ++i) base[i] = p.buffers[i] + first / p.round_elements[i] * 64;
  const unsigned long before = hls::stream_underflows() + hls::stream_leftovers();
  {
    using Beat = typename StreamOf<A...>::type;
    if constexpr (std::is_void<Beat>::value) {
      invoke(kernel, Call{base, nullptr, n, s}, std::index_sequence_for<A...>{});
    } else {
      // The gradient as the network sends it: 64-byte beats in array order, TLAST on the last.
      const std::uint64_t bytes = static_cast<std::uint64_t>(n) * p.grad_bytes;
      const std::uint64_t beats = (bytes + 63) / 64;
      const std::uint8_t* src = p.grad + first * p.grad_bytes;
      hls::stream<Beat> in;
      for (std::uint64_t i = 0; i < beats; ++i) {
        std::uint8_t raw[64] = {0};
        std::memcpy(raw, src + 64 * i, static_cast<std::size_t>(std::min<std::uint64_t>(64, bytes - 64 * i)));
        Beat beat;
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
      invoke(kernel, Call{base, &in, n, s}, std::index_sequence_for<A...>{});
    }  // every stream of the call is destroyed here: leftovers are counted
  }
  return hls::stream_underflows() + hls::stream_leftovers() - before;
}

template <class... A>
constexpr std::size_t pointer_count(void (*)(A...)) {
  return Signature<A...>::kPointers;
}

// Start loading the lines of the ports named in `prefetch` for elements [first, first + n) (hints
// only: they change no data and cannot fault).
inline void prefetch(const Ports& p, const unsigned char* which, std::uint64_t first, std::uint64_t n) {
  for (std::uint64_t i = 0; i < p.nports; ++i) {
    if (!which[i]) continue;
    const std::uint64_t lo = first / p.round_elements[i] * 64, hi = (first + n) / p.round_elements[i] * 64;
    const char* at = reinterpret_cast<const char*>(p.buffers[i]);
    for (std::uint64_t b = lo; b < hi; b += 64) _mm_prefetch(at + b, _MM_HINT_T0);
  }
}

// Returns the number of stream underflows and leftovers (0 when the kernel is right), -1 for an
// element count the 32-bit `n` register cannot hold, -2 for a port count that is not the kernel's.
template <class K>
long run(K kernel, const Ports& p, const unsigned char* prefetched, std::uint64_t n, const std::uint32_t* bits,
         int threads, std::uint64_t chunk, std::uint64_t align) {
  if (n > kMaxElements) return -1;
  if (p.nports != pointer_count(kernel)) return -2;
  if (n == 0) return 0;
  float s[kScalars];
  std::memcpy(s, bits, sizeof(s));
  align = std::max<std::uint64_t>(align, 1);
  chunk = std::max<std::uint64_t>(align, chunk / align * align);
  const std::uint64_t chunks = (n + chunk - 1) / chunk;
  threads = std::max(1, std::min(threads, 64));
  if (static_cast<std::uint64_t>(threads) > chunks) threads = static_cast<int>(chunks);
  std::vector<long> errors(static_cast<std::size_t>(threads), 0);

  auto work = [&](int t) {
    IeeeMode mode;
    const std::uint64_t per = (chunks + threads - 1) / threads * chunk;
    const std::uint64_t begin = std::min(n, per * t), end = std::min(n, per * (t + 1));
    for (std::uint64_t c = begin; c < end; c += chunk) {
      const std::uint64_t count = std::min(chunk, end - c);
      if (c + chunk < end) prefetch(p, prefetched, c + chunk, std::min(chunk, end - c - chunk));
      errors[t] += static_cast<long>(call(kernel, p, c, static_cast<unsigned int>(count), s));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  long total = 0;
  for (long e : errors) total += e;
  return total;
}

}  // namespace optimusnic_csim

// The C ABI hls/csim.py loads (ABI 2). `ports` are the stripe buffers in register-map order,
// `round_elements[i]` = elements per 64-byte beat of port i's array x that array's stripes,
// `prefetch[i]` != 0 for ports worth prefetching; `grad`/`grad_bytes` the gradient of a
// stream-source kernel (else null/0); `scalars` the 9 register bit patterns in register-map
// order; `align` the chunk alignment in elements. Returns as optimusnic_csim::run.
#define OPTIMUSNIC_CSIM_ENTRY(KERNEL)                                                                         \
  extern "C" int optimusnic_csim_abi(void) { return 2; }                                                      \
  extern "C" unsigned long long optimusnic_csim_ports(void) {                                                 \
    return optimusnic_csim::pointer_count(&KERNEL);                                                           \
  }                                                                                                           \
  extern "C" long optimusnic_csim_run(void* const* ports, const unsigned long long* round_elements,          \
                                      const unsigned char* prefetch, unsigned long long nports,              \
                                      const void* grad, unsigned long long grad_bytes, unsigned long long n,  \
                                      const unsigned int* scalars, int threads, unsigned long long chunk,     \
                                      unsigned long long align) {                                             \
    static_assert(sizeof(unsigned long long) == sizeof(std::uint64_t), "64-bit counts");                     \
    const optimusnic_csim::Ports p{reinterpret_cast<std::uint8_t* const*>(ports),                            \
                                   reinterpret_cast<const std::uint64_t*>(round_elements),                   \
                                   static_cast<const std::uint8_t*>(grad), grad_bytes, nports};              \
    return optimusnic_csim::run(&KERNEL, p, prefetch, n, scalars, threads, chunk, align);                    \
  }

#endif  // OPTIMUSNIC_CSIM_HOST_H
