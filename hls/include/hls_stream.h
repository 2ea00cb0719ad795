// hls_stream.h: the subset of Vitis HLS `hls::stream` our generated kernels use, for C simulation
// with g++ (written for OptimusNIC; behaviour follows the documented Vitis HLS API).
//
// C simulation runs dataflow processes one after another, so a stream is an unbounded FIFO here
// (the DEPTH argument and STREAM pragmas only size the hardware FIFO). Reading an empty stream is
// a kernel bug: it is counted in `hls::stream_underflows()` (checked by the simulation harness)
// and returns a value-initialised element instead of aborting the host process.
#ifndef OPTIMUSNIC_HLS_STREAM_H
#define OPTIMUSNIC_HLS_STREAM_H

#include <cstddef>
#include <vector>

namespace hls {

inline unsigned long& stream_underflow_counter() {
  static thread_local unsigned long count = 0;
  return count;
}
inline unsigned long stream_underflows() { return stream_underflow_counter(); }

template <typename T, int DEPTH = 0>
class stream {
 public:
  stream() { acquire(); }
  explicit stream(const char* /*name*/) { acquire(); }
  ~stream() { release(); }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  bool empty() const { return head_ == tail_; }
  bool full() const { return false; }
  std::size_t size() const { return tail_ - head_; }

  void write(const T& value) {
    if (tail_ == buf_.size()) buf_.resize(buf_.empty() ? 256 : 2 * buf_.size());
    buf_[tail_++] = value;
  }
  void operator<<(const T& value) { write(value); }

  T read() {
    if (head_ == tail_) {
      ++stream_underflow_counter();
      return T();
    }
    const T value = buf_[head_++];
    if (head_ == tail_) head_ = tail_ = 0;  // drained: reuse the storage from the start
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
  // A kernel call constructs its streams afresh; their storage is recycled per thread so a
  // simulation that calls the kernel many times does not pay for allocation and regrowth.
  static std::vector<std::vector<T>>& pool() {
    static thread_local std::vector<std::vector<T>> buffers;
    return buffers;
  }
  void acquire() {
    if (!pool().empty()) {
      buf_.swap(pool().back());
      pool().pop_back();
    }
  }
  void release() {
    if (pool().size() < 64) pool().push_back(std::move(buf_));
  }

  std::vector<T> buf_;  // slots [head_, tail_) hold the FIFO contents
  std::size_t head_ = 0;
  std::size_t tail_ = 0;
};

}  // namespace hls

#endif  // OPTIMUSNIC_HLS_STREAM_H
