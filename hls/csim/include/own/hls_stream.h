// hls_stream.h: stands in for AMD's `hls_stream.h` (AMD publishes its C simulation model,
// Apache-2.0, in the hls4ml wheel: the default for C simulation; this one serves
// `optimusnic csim --headers own`), for C simulation with g++; written for OptimusNIC, behaviour
// follows AMD's model. Subset of `hls::stream<T>`: construction (optionally named), read, write,
// read_nb, write_nb, empty, full, size, operator<< and >>.
//
// As in AMD's model, C simulation runs dataflow processes one after another, so a stream is an
// unbounded FIFO (the DEPTH argument and STREAM pragmas only size the hardware FIFO); reading an
// empty stream returns a value-initialised element, and both that and elements left in a stream
// when it is destroyed print AMD's warning lines on std::cout ("WARNING: Hls::stream '<name>' is
// read while empty, ..." / "... contains leftover data, ..."), which the simulation harness counts.
//
// Speed (the csim backend calls the kernel once per small chunk, so every call constructs its
// streams afresh): the FIFO is an array inside the stream object, so constructing one costs
// nothing; only a FIFO holding more than 4 KiB moves to a heap array, recycled per thread, so
// from the second call on it grows once. read() and write() are one compare, one copy and one increment;
// the rare paths (growth, underflow) are out of line so the kernel's pipelined loops stay tight.
#ifndef OPTIMUSNIC_HLS_STREAM_H
#define OPTIMUSNIC_HLS_STREAM_H

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

namespace hls {

template <typename T, int DEPTH = 0>
class stream {
  static_assert(std::is_trivially_copyable<T>::value, "stream elements are copied as bytes");

 public:
  stream() : name_("hls_stream") {}
  explicit stream(const char* name) : name_(name) {}
  explicit stream(const std::string& name) : name_(name) {}
  ~stream() {
    for (; missed_; --missed_) warn("is read while empty");
    if (tail_ != head_) warn("contains leftover data");
    release();
  }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  bool empty() const { return head_ == tail_; }
  bool full() const { return false; }
  std::size_t size() const { return tail_ - head_; }

  // Typed element copies (not memcpy): they cannot alias the counters, so a loop of reads or
  // writes keeps head_/tail_ in registers instead of a store-to-load chain through memory.
  void write(const T& value) {
    if (__builtin_expect(tail_ == cap_, 0)) make_room();
    buf_[tail_] = value;
    ++tail_;
  }
  void operator<<(const T& value) { write(value); }

  // Reading an empty stream calls nothing (a call would pin the counters in memory): it is
  // counted and warned about when the stream is destroyed, one line per read, as AMD's model does.
  T read() {
    if (__builtin_expect(head_ == tail_, 0)) {
      ++missed_;
      return T();
    }
    return buf_[head_++];
  }
  void read(T& value) { value = read(); }
  void operator>>(T& value) { value = read(); }

  bool read_nb(T& value) {
    if (empty()) {
      value = T();
      return false;
    }
    value = read();
    return true;
  }
  bool write_nb(const T& value) {
    write(value);
    return true;
  }

 private:
  // Contents up to kInline elements live inside the object (no allocation: one kernel call per
  // harness chunk constructs its streams on the stack); beyond that, in a heap array recycled
  // per thread.
  static constexpr std::size_t kInline = 4096 / sizeof(T) > 0 ? 4096 / sizeof(T) : 1;

  struct Block {
    T* data;
    std::size_t cap;
  };
  static std::vector<Block>& pool() {
    static thread_local struct Pool {
      std::vector<Block> blocks;
      ~Pool() {
        for (Block& b : blocks) std::free(b.data);
      }
    } pool;
    return pool.blocks;
  }
  void release() {
    if (!heap_) return;
    auto& blocks = pool();
    if (blocks.size() < 64) {  // every stream of a few kernel calls in flight on this thread
      blocks.push_back(Block{heap_, cap_});
    } else {
      std::free(heap_);
    }
  }
  __attribute__((noinline)) void warn(const char* what) const {
    std::cout << "WARNING: Hls::stream '" << name_ << "' " << what << ", which may result in RTL simulation hanging."
              << std::endl;
  }
  // Full: slide the live contents to the front when at least half the array is already read,
  // else move them to an array at least twice as large: the largest recycled one, so a stream of
  // the next kernel call (the same chunk size) grows once, straight to the size it needs.
  void make_room() {
    const std::size_t live = tail_ - head_;
    if (head_ && 2 * head_ >= cap_) {
      std::memmove(static_cast<void*>(buf_), buf_ + head_, live * sizeof(T));
    } else {
      std::size_t cap = 2 * cap_;
      T* data = nullptr;
      auto& blocks = pool();
      std::size_t best = blocks.size();
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        if (blocks[i].cap >= cap && (best == blocks.size() || blocks[i].cap > blocks[best].cap)) best = i;
      }
      if (best < blocks.size()) {
        data = blocks[best].data;
        cap = blocks[best].cap;
        blocks[best] = blocks.back();
        blocks.pop_back();
      }
      if (!data) {
        void* mem = nullptr;
        if (posix_memalign(&mem, 64, cap * sizeof(T))) throw std::bad_alloc();
        data = static_cast<T*>(mem);
      }
      std::memcpy(static_cast<void*>(data), buf_ + head_, live * sizeof(T));
      release();
      heap_ = data;
      buf_ = data;
      cap_ = cap;
    }
    head_ = 0;
    tail_ = live;
  }

  std::string name_;
  T* buf_ = reinterpret_cast<T*>(inline_);  // slots [head_, tail_) hold the FIFO contents
  std::size_t head_ = 0;
  std::size_t tail_ = 0;
  std::size_t cap_ = kInline;
  std::size_t missed_ = 0;  // reads of an empty stream
  T* heap_ = nullptr;
  alignas(64) unsigned char inline_[kInline * sizeof(T)];
};

}  // namespace hls

#endif  // OPTIMUSNIC_HLS_STREAM_H
