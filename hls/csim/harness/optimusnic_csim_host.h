// optimusnic_csim_host.h: host-side harness that turns a generated HLS kernel into the C simulation
// library of OptimusNIC (loaded from Python with ctypes by hls/csim.py). Not an HLS header: it is
// never synthesized and the kernel never includes it. It uses only the public HLS API
// (hls::stream read/write/empty, ap_uint ranges, ap_axiu fields), so it builds against AMD's own
// simulation headers (hls4ml's copy) or our stand-ins alike, at -std=c++14 as run_hls.tcl.
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
//   - chunks are small (hls/csim.py passes 8192 elements), which is how the dataflow processes
//     stream here: C simulation runs them one after another, so per chunk each FIFO holds the
//     chunk's beats of its port (up to 32 KiB) and they stay in L2;
//   - every buffer's length, the layout words and the chunk alignment are checked against n
//     before any memory is touched;
//   - a port whose buffer is not aligned as the kernel's beat type requires (AMD's hls::vector
//     is alignas(64); numpy gives 16 bytes) goes through a 64-byte aligned scratch copy of the
//     chunk: copied in before the call for a read port, out after it for a written port;
//   - a port's beats may lie `pitch` bytes apart (a multiple of 64) instead of back to back: one
//     stripe of an array that lies unstriped in host memory (the driver lends a parameter to
//     the soft card as its masters, every stripe a view of it). Such a port goes through the
//     scratch copy too, gathered beat by beat (scattered back for a written port);
//   - before each call the harness prefetches the next chunk's lines of the ports flagged for it
//     (`flags` bit 0);
//   - independent chunks run on the calling thread and on a pool of worker threads shared by
//     every call of the library: concurrent calls (the compute units of one card, run by the
//     driver at the same time) share its workers instead of each starting its own, and each call
//     uses at most `threads` threads, itself included. Every thread runs the kernel with
//     flush-to-zero and denormals-are-zero off and round-to-nearest-even, whatever the host
//     process set, so the arithmetic is IEEE-754 binary32 as design.md section 3 requires;
//   - a stream read when empty, or left holding data when the kernel returns, makes the C
//     simulation model print a warning line ("WARNING: Hls::stream ..."), AMD's and ours alike;
//     during a run the harness takes those lines off std::cout and returns their count: either
//     means two processes disagree on a beat count.
// Stream-source kernels get their gradient as 512-bit AXI4-Stream beats with TLAST, which the
// harness builds from a plain gradient array exactly as the network kernel would send them.
// Use: #include the kernel .cpp, then this header, then OPTIMUSNIC_CSIM_ENTRY(<top function>).
#ifndef OPTIMUSNIC_CSIM_HOST_H
#define OPTIMUSNIC_CSIM_HOST_H

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <mutex>
#include <streambuf>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <ap_axi_sdata.h>
#include <hls_stream.h>

namespace optimusnic_csim {

constexpr int kScalars = 9;
constexpr std::uint64_t kMaxElements = (std::uint64_t{1} << 32) - 33;  // the 32-bit `n` register, 32 margin
constexpr std::size_t kMaxPorts = 256;
constexpr std::uint64_t kFlagPrefetch = 1;  // prefetch the next chunk's lines

// IEEE mode for the lifetime of the guard: no FTZ (bit 15), no DAZ (bit 6), round to nearest.
class IeeeMode {
 public:
  IeeeMode() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~0x8040u & ~0x6000u); }
  ~IeeeMode() { _mm_setcsr(saved_); }

 private:
  unsigned int saved_;
};

// --- The kernel's signature: [grad stream&] [param stream&] pointer... unsigned int n, float x 9
//     [, unsigned int& status] (a gradient stream comes with STATUS; the parameter stream is an output) ---

template <class T>
struct is_stream_ref : std::false_type {};
template <class T>
struct is_stream_ref<hls::stream<T>&> : std::true_type {};

template <class... A>
struct Count {
  static constexpr std::size_t pointers = 0, streams = 0, floats = 0, statuses = 0;
};
template <class H, class... T>
struct Count<H, T...> {
  static constexpr std::size_t pointers = (std::is_pointer<H>::value ? 1 : 0) + Count<T...>::pointers;
  static constexpr std::size_t streams = (is_stream_ref<H>::value ? 1 : 0) + Count<T...>::streams;
  static constexpr std::size_t floats = (std::is_same<H, float>::value ? 1 : 0) + Count<T...>::floats;
  static constexpr std::size_t statuses = (std::is_same<H, unsigned int&>::value ? 1 : 0) + Count<T...>::statuses;
};

template <class... A>
struct Signature {
  static constexpr std::size_t kPointers = Count<A...>::pointers;
  static constexpr std::size_t kStreams = Count<A...>::streams;
  static constexpr std::size_t kGrad = Count<A...>::statuses;  // a stream-source kernel reports STATUS
  static constexpr std::size_t kParam = kStreams - kGrad;
  static_assert(kGrad <= 1 && kStreams >= kGrad && kParam <= 1,
                "at most two AXI4-Stream arguments: the gradient (with STATUS) and the parameters out");
  static_assert(Count<A...>::floats == kScalars, "the kernel takes the 9 scalar registers of design.md section 3");
  static_assert(sizeof...(A) == kStreams + kGrad + kPointers + 1 + kScalars,
                "arguments: [grad stream] [param stream] pointers n scalars [status]");
  static_assert(kPointers <= kMaxPorts, "too many m_axi ports");
};

// One chunk's view of the kernel arguments.
struct Call {
  std::uint8_t* const* base;  // per port: the buffer the kernel gets for this chunk
  void* stream;               // the gradient stream (stream-source kernels)
  void* param;                // the parameter stream out (out_sink memory+stream)
  std::size_t grad_streams;   // 1 when the first argument is the gradient stream
  unsigned int n;             // elements in this chunk
  const float* scalars;
  unsigned int* status;       // the STATUS word (stream-source kernels)
};

enum ArgKind { kStreamArg, kPointerArg, kFloatArg, kCountArg, kStatusArg };
template <class A>
struct KindOf
    : std::integral_constant<int, is_stream_ref<A>::value    ? kStreamArg
                                  : std::is_same<A, unsigned int&>::value ? kStatusArg
                                  : std::is_pointer<A>::value ? kPointerArg
                                  : std::is_same<A, float>::value ? kFloatArg
                                                                  : kCountArg> {};

template <class A, std::size_t I, std::size_t S, std::size_t P>
A argument(const Call& c, std::integral_constant<int, kStreamArg>) {
  return *static_cast<typename std::remove_reference<A>::type*>(I < c.grad_streams ? c.stream : c.param);
}
template <class A, std::size_t I, std::size_t S, std::size_t P>
A argument(const Call& c, std::integral_constant<int, kPointerArg>) {
  return reinterpret_cast<A>(c.base[I - S]);
}
template <class A, std::size_t I, std::size_t S, std::size_t P>
A argument(const Call& c, std::integral_constant<int, kFloatArg>) {
  return c.scalars[I - S - P - 1];
}
template <class A, std::size_t I, std::size_t S, std::size_t P>
A argument(const Call& c, std::integral_constant<int, kStatusArg>) {
  return *c.status;
}
template <class A, std::size_t I, std::size_t S, std::size_t P>
A argument(const Call& c, std::integral_constant<int, kCountArg>) {
  static_assert(std::is_same<A, unsigned int>::value, "the element count n is an unsigned int");
  return c.n;
}

template <class... A, std::size_t... I>
void invoke(void (*kernel)(A...), const Call& c, std::index_sequence<I...>) {
  using S = Signature<A...>;
  kernel(argument<A, I, S::kStreams, S::kPointers>(c, KindOf<A>())...);
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

// Per pointer argument: the alignment its beat type requires and whether the kernel writes it.
struct PointerTraits {
  std::size_t align[kMaxPorts];
  bool written[kMaxPorts];
  std::size_t count;
};
template <class A>
void record(PointerTraits& t, std::true_type) {
  using E = typename std::remove_pointer<A>::type;
  t.align[t.count] = alignof(E);
  t.written[t.count] = !std::is_const<E>::value;
  ++t.count;
}
template <class A>
void record(PointerTraits&, std::false_type) {}
template <class... A>
PointerTraits pointer_traits(void (*)(A...)) {
  PointerTraits t{};
  int expand[] = {0, (record<A>(t, std::is_pointer<A>()), 0)...};
  (void)expand;
  return t;
}

// --- Warnings of the C simulation model, taken off std::cout during runs and counted ---

class WarningFilter : public std::streambuf {
 public:
  static WarningFilter& instance() {
    static WarningFilter* filter = new WarningFilter;  // never destroyed: outlives every thread
    return *filter;
  }
  void attach() {
    std::lock_guard<std::mutex> lock(attach_mu_);
    if (users_++ == 0) saved_ = std::cout.rdbuf(this);
  }
  void detach() {
    std::lock_guard<std::mutex> lock(attach_mu_);
    if (--users_ == 0) std::cout.rdbuf(saved_);
  }
  long count() const { return count_.load(); }

 protected:
  int overflow(int ch) override {
    if (ch == traits_type::eof()) return 0;
    const char c = static_cast<char>(ch);
    xsputn(&c, 1);
    return ch;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::string& line = pending();
    for (std::streamsize i = 0; i < n; ++i) {
      line.push_back(s[i]);
      if (s[i] == '\n') flush_line(line);
    }
    return n;
  }

 private:
  static std::string& pending() {
    static thread_local std::string line;
    return line;
  }
  void flush_line(std::string& line) {
    static const char kPrefix[] = "WARNING: Hls::stream";
    if (line.compare(0, sizeof(kPrefix) - 1, kPrefix) == 0) {
      ++count_;
    } else {
      std::lock_guard<std::mutex> lock(write_mu_);
      if (saved_) saved_->sputn(line.data(), static_cast<std::streamsize>(line.size()));
    }
    line.clear();
  }

  std::mutex attach_mu_, write_mu_;
  int users_ = 0;
  std::streambuf* saved_ = nullptr;
  std::atomic<long> count_{0};
};

// --- One chunk ---

struct Ports {
  std::uint8_t* const* buffers;  // one per pointer argument, register-map order
  const std::uint64_t* lengths;  // bytes of each of those buffers
  const std::uint64_t* info;     // per port 5 words: elements per beat, stripes, stripe index, flags, pitch
  const std::uint8_t* grad;      // stream-source kernels: the gradient array
  std::uint64_t grad_bytes;      // element bytes of that gradient
  std::uint64_t grad_length;     // bytes of that array
  std::uint8_t* param;           // out_sink memory+stream kernels: where the parameter stream lands, array order
  std::uint64_t param_bytes;     // element bytes of the output dtype
  std::uint64_t param_length;    // bytes of that buffer
  std::uint64_t nports;
  bool scratch[kMaxPorts];       // the port goes through an aligned copy
  bool written[kMaxPorts];       // the kernel writes through the port
  bool any_scratch;
};

constexpr std::uint64_t kInfoWords = 5;
inline std::uint64_t elements_per_beat(const Ports& p, std::size_t i) { return p.info[kInfoWords * i]; }
inline std::uint64_t stripes_of(const Ports& p, std::size_t i) { return p.info[kInfoWords * i + 1]; }
inline std::uint64_t stripe_index(const Ports& p, std::size_t i) { return p.info[kInfoWords * i + 2]; }
inline std::uint64_t flags_of(const Ports& p, std::size_t i) { return p.info[kInfoWords * i + 3]; }
// Bytes from one beat of port i's buffer to the next (64: back to back).
inline std::uint64_t pitch_of(const Ports& p, std::size_t i) { return p.info[kInfoWords * i + 4]; }

// Byte offset of element `first` (a multiple of every round) in port i's stripe buffer.
inline std::uint64_t offset_of(const Ports& p, std::size_t i, std::uint64_t first) {
  return first / (elements_per_beat(p, i) * stripes_of(p, i)) * pitch_of(p, i);
}
// Bytes of port i's stripe that a chunk of `count` elements covers (hls/layout.py stripe_bytes).
inline std::uint64_t chunk_bytes(const Ports& p, std::size_t i, std::uint64_t count) {
  const std::uint64_t beats = (count + elements_per_beat(p, i) - 1) / elements_per_beat(p, i);
  const std::uint64_t s = stripes_of(p, i), k = stripe_index(p, i);
  return beats > k ? (beats - k + s - 1) / s * 64 : 0;
}

// Per-thread 64-byte aligned scratch, one slot per port, grown on demand.
class Scratch {
 public:
  ~Scratch() { std::free(mem_); }
  // Slot `port` of `ports` slots of bytes_per_slot each (the same for every slot of one chunk).
  std::uint8_t* slot(std::size_t port, std::uint64_t bytes_per_slot, std::size_t ports) {
    const std::uint64_t need = bytes_per_slot * ports;
    if (need > size_) {  // grows only: chunks of one size reuse it
      std::free(mem_);
      void* m = nullptr;
      mem_ = posix_memalign(&m, 64, need) == 0 ? static_cast<std::uint8_t*>(m) : nullptr;
      size_ = mem_ ? need : 0;
    }
    return mem_ ? mem_ + port * bytes_per_slot : nullptr;
  }

 private:
  std::uint8_t* mem_ = nullptr;
  std::uint64_t size_ = 0;
};
inline Scratch& thread_scratch() {
  static thread_local Scratch scratch;
  return scratch;
}

inline void prefetch(const Ports& p, std::uint64_t first, std::uint64_t n) {
  for (std::size_t i = 0; i < p.nports; ++i) {
    if (!(flags_of(p, i) & kFlagPrefetch)) continue;
    const char* at = reinterpret_cast<const char*>(p.buffers[i]) + offset_of(p, i, first);
    const std::uint64_t beats = chunk_bytes(p, i, n) / 64, pitch = pitch_of(p, i);
    for (std::uint64_t b = 0; b < beats; ++b) _mm_prefetch(at + b * pitch, _MM_HINT_T0);
  }
}

// The parameter stream of one chunk (a packet of its own here: each chunk is one kernel call) into
// the parameter buffer at the chunk's first element: ceil(n x element bytes / 64) beats, TKEEP all
// ones but over the last beat's tail, zero bytes past it, TLAST on the last beat only. Anything
// else is printed as a stream warning, which the caller counts as an error.
template <class Beat>
void drain_param(hls::stream<Beat>& out, const Ports& p, std::uint64_t first, unsigned int n) {
  const std::uint64_t bytes = static_cast<std::uint64_t>(n) * p.param_bytes;
  const std::uint64_t beats = (bytes + 63) / 64;
  std::uint8_t* dst = p.param + first * p.param_bytes;
  long bad = 0;
  for (std::uint64_t i = 0; i < beats; ++i) {
    if (out.empty()) {
      std::cout << "WARNING: Hls::stream 'param' sent " << i << " beats, want " << beats << "\n";
      return;
    }
    const Beat beat = out.read();
    const std::uint64_t used = std::min<std::uint64_t>(64, bytes - 64 * i);
    std::uint8_t raw[64];
    for (int w = 0; w < 8; ++w) {
      const std::uint64_t word = beat.data.range(64 * w + 63, 64 * w).to_uint64();
      std::memcpy(raw + 8 * w, &word, 8);
    }
    std::memcpy(dst + 64 * i, raw, static_cast<std::size_t>(used));
    const std::uint64_t keep = beat.keep.range(63, 0).to_uint64(), strb = beat.strb.range(63, 0).to_uint64();
    const std::uint64_t want = used == 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << used) - 1;
    bad += (keep != want) + (strb != want) + (beat.last.to_uint64() != (i + 1 == beats ? 1u : 0u));
    for (std::uint64_t k = used; k < 64; ++k) bad += raw[k] != 0;
  }
  if (bad) std::cout << "WARNING: Hls::stream 'param' packet framing: " << bad << " wrong TKEEP/TSTRB/TLAST/pad\n";
  if (!out.empty()) std::cout << "WARNING: Hls::stream 'param' sent more beats than n elements take\n";
}

// The stream type at argument `I` (the parameter stream), else void.
template <std::size_t I, class... A>
struct StreamAt {
  using type = void;
};
template <std::size_t I, class H, class... A>
struct StreamAt<I, H, A...> : StreamAt<I - 1, A...> {};
template <class T, class... A>
struct StreamAt<0, hls::stream<T>&, A...> {
  using type = T;
};

template <class... A>
void invoke_with_param(void (*kernel)(A...), const Ports& p, Call c, std::uint64_t first, std::true_type) {
  using Beat = typename StreamAt<Signature<A...>::kGrad, A...>::type;
  hls::stream<Beat> out("param");
  c.param = &out;
  invoke(kernel, c, std::index_sequence_for<A...>{});
  drain_param(out, p, first, c.n);
}
template <class... A>
void invoke_with_param(void (*kernel)(A...), const Ports& p, Call c, std::uint64_t first, std::false_type) {
  invoke(kernel, c, std::index_sequence_for<A...>{});
  (void)p;
  (void)first;
}

template <class... A>
void call_kernel(void (*kernel)(A...), const Ports& p, std::uint8_t* const* base, std::uint64_t first, unsigned int n,
                 const float* s, std::false_type /* memory gradient */) {
  invoke_with_param(kernel, p, Call{base, nullptr, nullptr, 0, n, s, nullptr}, first,
                    std::integral_constant<bool, Signature<A...>::kParam != 0>());
}

template <class... A>
void call_kernel(void (*kernel)(A...), const Ports& p, std::uint8_t* const* base, std::uint64_t first, unsigned int n,
                 const float* s, std::true_type /* stream gradient */) {
  using Beat = typename StreamOf<A...>::type;
  // The gradient as the network sends it: 64-byte beats in array order, TLAST on the last.
  const std::uint64_t bytes = static_cast<std::uint64_t>(n) * p.grad_bytes;
  const std::uint64_t beats = (bytes + 63) / 64;
  const std::uint8_t* src = p.grad + first * p.grad_bytes;
  hls::stream<Beat> in("grad");
  for (std::uint64_t i = 0; i < beats; ++i) {
    std::uint8_t raw[64] = {0};
    std::memcpy(raw, src + 64 * i, static_cast<std::size_t>(std::min<std::uint64_t>(64, bytes - 64 * i)));
    Beat beat;
    for (int w = 0; w < 8; ++w) {
      std::uint64_t word;
      std::memcpy(&word, raw + 8 * w, 8);
      beat.data.range(64 * w + 63, 64 * w) = word;
    }
    // TKEEP on the shard's bytes: all 64 but on the last beat, as a right sender (design.md section 4)
    const std::uint64_t in_beat = std::min<std::uint64_t>(64, bytes - 64 * i);
    const std::uint64_t keep = in_beat == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << in_beat) - 1;
    beat.keep = static_cast<unsigned long long>(keep);
    beat.strb = static_cast<unsigned long long>(keep);
    beat.last = i + 1 == beats;
    in.write(beat);
  }
  unsigned int status = 0;
  invoke_with_param(kernel, p, Call{base, &in, nullptr, 1, n, s, &status}, first,
                    std::integral_constant<bool, Signature<A...>::kParam != 0>());
  if (!in.empty()) std::cout << "WARNING: Hls::stream 'grad' contains leftover data (beats the kernel did not read)\n";
  // Every chunk is a whole shard here, so a STATUS bit is the kernel's error, counted as a warning.
  if (status) std::cout << "WARNING: Hls::stream 'grad' shard reported STATUS " << status << "\n";
}

// `beats` 64-byte beats from `src` (one every `src_pitch` bytes) to `dst` (one every `dst_pitch`).
inline void copy_beats(std::uint8_t* dst, std::uint64_t dst_pitch, const std::uint8_t* src, std::uint64_t src_pitch,
                       std::uint64_t beats) {
  if (dst_pitch == 64 && src_pitch == 64) {
    std::memcpy(dst, src, static_cast<std::size_t>(beats * 64));
    return;
  }
  for (std::uint64_t b = 0; b < beats; ++b) std::memcpy(dst + b * dst_pitch, src + b * src_pitch, 64);
}

// Run the chunk at element `first` (a multiple of every round) of `n` elements.
template <class... A>
void chunk(void (*kernel)(A...), const Ports& p, std::uint64_t first, unsigned int n, const float* s) {
  using S = Signature<A...>;
  std::uint8_t* base[S::kPointers > 0 ? S::kPointers : 1];
  for (std::size_t i = 0; i < S::kPointers; ++i) base[i] = p.buffers[i] + offset_of(p, i, first);
  if (p.any_scratch) {
    std::uint64_t per = 0;  // bytes of the largest port's part of the chunk: every scratch slot's size
    for (std::size_t i = 0; i < S::kPointers; ++i) per = std::max(per, chunk_bytes(p, i, n));
    for (std::size_t i = 0; i < S::kPointers; ++i) {
      if (!p.scratch[i]) continue;
      std::uint8_t* slot = thread_scratch().slot(i, per, S::kPointers);
      if (!slot) throw std::bad_alloc();
      if (!p.written[i]) copy_beats(slot, 64, base[i], pitch_of(p, i), chunk_bytes(p, i, n) / 64);
      base[i] = slot;
    }
  }
  call_kernel(kernel, p, base, first, n, s, std::integral_constant<bool, S::kGrad != 0>());
  if (p.any_scratch) {
    for (std::size_t i = 0; i < S::kPointers; ++i) {
      if (!p.scratch[i] || !p.written[i]) continue;
      copy_beats(p.buffers[i] + offset_of(p, i, first), pitch_of(p, i), base[i], 64, chunk_bytes(p, i, n) / 64);
    }
  }
}

// --- Worker pool shared by every call of the library ---

// A call runs its own chunks and hands out blocks of them to the pool's workers. Workers that
// run out of work spin briefly before they sleep, as OpenMP runtimes do: on a busy machine a
// sleeping thread can wait a scheduler slice (milliseconds) to be woken, longer than a call.
struct Job {
  const std::function<void(std::uint64_t, std::uint64_t)>* work;  // runs chunks [begin, end) of elements
  std::uint64_t n = 0, block = 1;
  std::atomic<std::uint64_t> next{0};
  std::atomic<int> active{1};  // threads inside the job, the caller included
  int max_workers = 1;         // pool workers allowed in (the caller not counted)
  int helpers = 0;             // pool workers that joined (guarded by the pool's mutex)
  std::atomic<bool> failed{false};
  std::exception_ptr error;    // set once, by whoever sets `failed` first

  // Take blocks until none is left; returns on exhaustion (or when a block failed).
  void drain() {
    for (;;) {
      const std::uint64_t begin = next.fetch_add(block);
      if (begin >= n) return;
      try {
        (*work)(begin, std::min(n, begin + block));
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
        next.store(n);
        return;
      }
    }
  }
};

class Pool {
 public:
  static Pool& instance() {
    static Pool* pool = new Pool;  // never destroyed: its threads live as long as the process
    return *pool;
  }
  // Run `job` on the calling thread and on up to `helpers` pool workers; returns when it is done.
  void run(Job& job, int helpers) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (started_ < helpers) {
        std::thread(&Pool::loop, this).detach();
        ++started_;
      }
      job.max_workers = helpers;
      jobs_.push_back(&job);
      generation_.fetch_add(1);
    }
    work_cv_.notify_all();
    job.drain();
    {
      std::lock_guard<std::mutex> lock(mu_);  // no worker joins after this
      jobs_.erase(std::find(jobs_.begin(), jobs_.end(), &job));
    }
    for (unsigned spins = 0; job.active.load() > 1; ++spins) {  // helpers finishing their last block
      if (spins < 4096) {
        _mm_pause();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  Job* pick() {
    for (Job* j : jobs_)
      if (j->helpers < j->max_workers && j->next.load() < j->n) return j;
    return nullptr;
  }
  void loop() {
    IeeeMode mode;  // this thread is ours: it keeps the mode for life
    for (;;) {
      Job* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
          job = pick();
          if (job) break;
          // Spin about half a millisecond for new work before sleeping.
          const std::uint64_t seen = generation_.load();
          lock.unlock();
          bool fresh = false;
          for (int i = 0; i < 20000 && !fresh; ++i) {
            _mm_pause();
            fresh = generation_.load() != seen;
          }
          lock.lock();
          if (!fresh && !pick()) work_cv_.wait(lock);
        }
        ++job->helpers;
        job->active.fetch_add(1);
      }
      job->drain();
      job->active.fetch_sub(1);  // the last touch of the job: its caller may return from here on
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::vector<Job*> jobs_;
  std::atomic<std::uint64_t> generation_{0};
  int started_ = 0;
};

template <class... A>
std::size_t pointer_count(void (*)(A...)) {
  return Signature<A...>::kPointers;
}

// Whether the buffers hold what n elements take, and the layout words and chunk alignment make
// sense, checked before any memory is touched (hls/csim.py checks the same; this guards direct
// callers of the C ABI).
template <class... A>
bool layout_ok(void (*)(A...), const Ports& p, std::uint64_t n, std::uint64_t align) {
  using S = Signature<A...>;
  for (std::size_t i = 0; i < p.nports; ++i) {
    const std::uint64_t per = elements_per_beat(p, i), s = stripes_of(p, i);
    if ((per != 16 && per != 32) || s == 0 || s > 64 || stripe_index(p, i) >= s) return false;
    if (pitch_of(p, i) < 64 || pitch_of(p, i) % 64 != 0) return false;
    if (align == 0 || align % (per * s) != 0) return false;
    if (n && (!p.buffers[i] || chunk_bytes(p, i, n) > p.lengths[i])) return false;
  }
  if (S::kGrad && n) {
    if ((p.grad_bytes != 2 && p.grad_bytes != 4) || !p.grad || n * p.grad_bytes > p.grad_length) return false;
  }
  if (S::kParam && n) {
    if ((p.param_bytes != 2 && p.param_bytes != 4) || !p.param || n * p.param_bytes > p.param_length) return false;
  }
  return true;
}

// Returns the number of stream warnings (0 when the kernel is right), -1 for an element count the
// 32-bit `n` register cannot hold, -2 for a port count that is not the kernel's, -3 when out of
// memory, -4 for a buffer shorter than n elements take or a layout that is not the kernel's.
template <class... A>
long run(void (*kernel)(A...), Ports& p, std::uint64_t n, const std::uint32_t* bits, int threads, std::uint64_t chunk_n,
         std::uint64_t align) {
  if (n > kMaxElements) return -1;
  if (p.nports != pointer_count(kernel)) return -2;
  if (!layout_ok(kernel, p, n, align)) return -4;
  if (n == 0) return 0;
  const PointerTraits traits = pointer_traits(kernel);
  p.any_scratch = false;
  for (std::size_t i = 0; i < p.nports; ++i) {
    p.written[i] = traits.written[i];
    p.scratch[i] = reinterpret_cast<std::uintptr_t>(p.buffers[i]) % traits.align[i] != 0 || pitch_of(p, i) != 64;
    p.any_scratch = p.any_scratch || p.scratch[i];
  }
  float s[kScalars];
  std::memcpy(s, bits, sizeof(s));
  chunk_n = std::max<std::uint64_t>(align, chunk_n / align * align);
  std::function<void(std::uint64_t, std::uint64_t)> work = [&](std::uint64_t begin, std::uint64_t end) {
    for (std::uint64_t c = begin; c < end; c += chunk_n) {
      const std::uint64_t count = std::min(chunk_n, end - c);
      if (c + chunk_n < end) prefetch(p, c + chunk_n, std::min(chunk_n, end - c - chunk_n));
      chunk(kernel, p, c, static_cast<unsigned int>(count), s);
    }
  };
  WarningFilter& filter = WarningFilter::instance();
  filter.attach();
  const long before = filter.count();
  long rc = 0;
  try {
    threads = std::max(1, std::min(threads, 64));
    const std::uint64_t chunks = (n + chunk_n - 1) / chunk_n;
    IeeeMode mode;
    if (threads == 1 || chunks == 1) {
      work(0, n);
    } else {
      // Blocks of about 16K elements: long sequential runs per thread, and enough blocks to
      // balance threads slowed by other load.
      Job job;
      job.work = &work;
      job.n = n;
      job.block = std::max<std::uint64_t>(1, 16384 / chunk_n) * chunk_n;
      Pool::instance().run(job, threads - 1);
      if (job.failed.load()) std::rethrow_exception(job.error);
    }
    rc = filter.count() - before;
  } catch (const std::bad_alloc&) {
    rc = -3;
  }
  filter.detach();
  return rc;
}

// --- Over-aligned allocations of this library (AMD's hls::stream is a std::deque) ---

// AMD's hls::stream keeps its elements in a std::deque, which allocates a 512-byte node every 8
// beats and frees it once they are read; the beats are hls::vector, alignas(64), so those nodes
// come from aligned operator new, which glibc (before 2.38) serves from memalign without its
// per-thread cache: that alone cost several times the kernel's arithmetic. Blocks of up to 4 KiB
// and 64-byte alignment are therefore recycled through per-thread free lists (operator new and
// delete for over-aligned types, replaced inside this library only: hls/csim.py links it with
// exports.map, which exports the three optimusnic_csim_* functions and nothing else, so no other
// library of the process sees these definitions).
class AlignedBlocks {
 public:
  static constexpr std::size_t kLine = 64, kClasses = 64, kKeep = 512;  // sizes 64 B .. 4 KiB
  ~AlignedBlocks() {
    for (auto& list : free_)
      for (void* b : list) std::free(b);
  }
  static void* take(std::size_t size, std::size_t align) {
    const std::size_t c = (size + kLine - 1) / kLine;
    if (align <= kLine && c >= 1 && c <= kClasses) {
      auto& list = mine().free_[c - 1];
      if (!list.empty()) {
        void* b = list.back();
        list.pop_back();
        return b;
      }
      size = c * kLine;
      align = kLine;
    }
    void* b = nullptr;
    if (posix_memalign(&b, std::max(align, sizeof(void*)), std::max<std::size_t>(size, 1))) throw std::bad_alloc();
    return b;
  }
  static void give(void* b, std::size_t size, std::size_t align) {
    const std::size_t c = (size + kLine - 1) / kLine;
    if (b && align <= kLine && c >= 1 && c <= kClasses) {
      auto& list = mine().free_[c - 1];
      if (list.size() < kKeep) {
        list.push_back(b);
        return;
      }
    }
    std::free(b);
  }

 private:
  static AlignedBlocks& mine() {
    static thread_local AlignedBlocks blocks;
    return blocks;
  }
  std::vector<void*> free_[kClasses];
};

}  // namespace optimusnic_csim

// Sized delete only: every over-aligned object this library frees is one it allocated with its
// size known (std::allocator), and the size picks the free list.
void* operator new(std::size_t size, std::align_val_t align) {
  return optimusnic_csim::AlignedBlocks::take(size, static_cast<std::size_t>(align));
}
void operator delete(void* p, std::size_t size, std::align_val_t align) noexcept {
  optimusnic_csim::AlignedBlocks::give(p, size, static_cast<std::size_t>(align));
}
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }

// The C ABI hls/csim.py loads (ABI 6). `ports` are the stripe buffers in register-map order and
// `lengths` their sizes in bytes (64 per beat, whatever their pitch); `port_info` 5 words per port:
// elements per 64-byte beat of its array, stripes of its array, its stripe index, flags (bit 0:
// prefetch the next chunk), the pitch of its beats in the buffer (64: back to back);
// `grad`/`grad_bytes`/`grad_length` the gradient of a stream-source kernel, its element size and
// its size in bytes (else null/0/0); `param`/`param_bytes`/`param_length` where the parameter stream
// of an out_sink memory+stream kernel lands (array order), its element size and its size in bytes
// (else null/0/0); `scalars` the 9
// register bit patterns in register-map order; `threads` the most worker threads this call uses;
// `chunk` the elements per kernel call and `align` the chunk alignment in elements. Returns as
// optimusnic_csim::run.
#define OPTIMUSNIC_CSIM_ENTRY(KERNEL)                                                                          \
  extern "C" int optimusnic_csim_abi(void) { return 6; }                                                       \
  extern "C" unsigned long long optimusnic_csim_ports(void) { return optimusnic_csim::pointer_count(&KERNEL); } \
  extern "C" long optimusnic_csim_run(void* const* ports, const unsigned long long* lengths,                   \
                                      const unsigned long long* port_info, unsigned long long nports,           \
                                      const void* grad, unsigned long long grad_bytes,                          \
                                      unsigned long long grad_length, void* param,                              \
                                      unsigned long long param_bytes, unsigned long long param_length,          \
                                      unsigned long long n,                                                     \
                                      const unsigned int* scalars, int threads, unsigned long long chunk,       \
                                      unsigned long long align) {                                               \
    static_assert(sizeof(unsigned long long) == sizeof(std::uint64_t), "64-bit counts");                      \
    if (nports > optimusnic_csim::kMaxPorts) return -2;                                                        \
    optimusnic_csim::Ports p{};                                                                                \
    p.buffers = reinterpret_cast<std::uint8_t* const*>(ports);                                                 \
    p.lengths = reinterpret_cast<const std::uint64_t*>(lengths);                                               \
    p.info = reinterpret_cast<const std::uint64_t*>(port_info);                                                \
    p.grad = static_cast<const std::uint8_t*>(grad);                                                           \
    p.grad_bytes = grad_bytes;                                                                                 \
    p.grad_length = grad_length;                                                                               \
    p.param = static_cast<std::uint8_t*>(param);                                                               \
    p.param_bytes = param_bytes;                                                                               \
    p.param_length = param_length;                                                                             \
    p.nports = nports;                                                                                         \
    return optimusnic_csim::run(&KERNEL, p, n, scalars, threads, chunk, align);                                \
  }

#endif  // OPTIMUSNIC_CSIM_HOST_H
