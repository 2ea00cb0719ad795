// hls_stream.h: the subset of Vitis HLS `hls::stream` our generated kernels use, for C simulation
// with g++ (written for OptimusNIC; behaviour follows the documented Vitis HLS API).
//
// C simulation runs dataflow processes one after another, so a stream is an unbounded FIFO here
// (the DEPTH argument and STREAM pragmas only size the hardware FIFO). Reading an empty stream is
// a kernel bug: it is counted in `hls::stream_underflows()` (checked by the simulation harness)
// and returns a value-initialised element instead of aborting the host process; so are elements
// left in a stream when it is destroyed (`hls::stream_leftovers()`).
//
// Speed (the csim backend calls the kernel once per small chunk, so every call constructs its
// streams afresh): the FIFO is an array inside the stream object, so constructing one costs
// nothing and a chunk's beats stay in L1; only a FIFO holding more than 4 KiB moves to a heap
// array (recycled per thread). read() and write() are one compare, one 64-byte copy and one
// increment; the rare paths (growth, underflow) are out of line so the kernel's pipelined loops
// stay tight.
#ifndef OPTIMUSNIC_HLS_STREAM_H
#define OPTIMUSNIC_HLS_STREAM_H

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <vector>

namespace hls {

inline unsigned long& stream_underflow_counter() {
  static thread_local unsigned long count = 0;
  return count;
}
inline unsigned long stream_underflows() { return stream_underflow_counter(); }
// Elements still in a stream when it is destroyed: at the end of a kernel call every FIFO between
// two processes must be empty, or producer and consumer disagree on a beat count.
inline unsigned long& stream_leftover_counter() {
  static thread_local unsigned long count = 0;
  return count;
}
inline unsigned long stream_leftovers() { return stream_leftover_counter(); }

template <typename T, int DEPTH = 0>
class stream {
  static_assert(std::is_trivially_copyable<T>::value, "stream elements are copied as bytes");

 public:
  stream() = default;
  explicit stream(const char* /*name*/) {}
  ~stream() {
    stream_leftover_counter() += static_cast<unsigned long>(tail_ - head_);
    release();
  }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  bool empty() const { return head_ == tail_; }
  bool full() const { return false; }
  std::size_t size() const { return tail_ - head_; }

  void write(const T& value) {
    if (__builtin_expect(tail_ == cap_, 0)) make_room();
    std::memcpy(static_cast<void*>(buf_ + tail_), &value, sizeof(T));
    ++tail_;
  }
  void operator<<(const T& value) { write(value); }

  T read() {
    if (__builtin_expect(head_ == tail_, 0)) return underflow();
    T value;
    std::memcpy(static_cast<void*>(&value), buf_ + head_, sizeof(T));
    ++head_;
    return value;
  }
  void read(T& value) { value = read(); }
  void operator>>(T& value) { value = read(); }

  bool read_nb(T& value) {
    if (empty()) return false;
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
    if (blocks.size() < 16) {
      blocks.push_back(Block{heap_, cap_});
    } else {
      std::free(heap_);
    }
  }
  __attribute__((noinline)) T underflow() {
    ++stream_underflow_counter();
    return T();
  }
  // Full: slide the live contents to the front when at least half the array is already read,
  // else move them to an array twice as large.
  __attribute__((noinline)) void make_room() {
    const std::size_t live = tail_ - head_;
    if (head_ && 2 * head_ >= cap_) {
      std::memmove(static_cast<void*>(buf_), buf_ + head_, live * sizeof(T));
    } else {
      const std::size_t cap = 2 * cap_;
      T* data = nullptr;
      auto& blocks = pool();
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        if (blocks[i].cap >= cap) {
          data = blocks[i].data;
          blocks[i] = blocks.back();
          blocks.pop_back();
          break;
        }
      }
      if (!data) {
        data = static_cast<T*>(std::aligned_alloc(64, (cap * sizeof(T) + 63) / 64 * 64));
        if (!data) throw std::bad_alloc();
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

  T* buf_ = reinterpret_cast<T*>(inline_);  // slots [head_, tail_) hold the FIFO contents
  std::size_t head_ = 0;
  std::size_t tail_ = 0;
  std::size_t cap_ = kInline;
  T* heap_ = nullptr;
  alignas(64) unsigned char inline_[kInline * sizeof(T)];
};

}  // namespace hls

#endif  // OPTIMUSNIC_HLS_STREAM_H
