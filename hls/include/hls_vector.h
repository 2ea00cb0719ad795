// hls_vector.h: stands in for AMD Vitis HLS's `hls_vector.h` (not published on PyPI), for C
// simulation with g++; written for OptimusNIC, behaviour follows the documented Vitis HLS API.
// Subset: `hls::vector<T, N>`, default and broadcast construction, operator[], size().
//
// A fixed-size array of N elements that HLS maps to one wide word (16 x float = one 512-bit beat).
// Aligned as the vendor type: to the greatest power of two dividing sizeof(T) * N (64 bytes for a
// 512-bit beat), so the compiler may use aligned vector loads on it; the simulation harness hands
// the kernel buffers aligned to that (hls/csim_harness/optimusnic_csim_host.h).
#ifndef OPTIMUSNIC_HLS_VECTOR_H
#define OPTIMUSNIC_HLS_VECTOR_H

#include <cstddef>

namespace hls {

namespace details {

// The greatest power of two that divides n (the vendor header's rule for the vector's alignment).
constexpr std::size_t gp2(std::size_t n) { return n == 0 ? 0 : (n % 2 ? 1 : 2 * gp2(n / 2)); }

}  // namespace details

template <typename T, std::size_t N>
class alignas(details::gp2(sizeof(T) * N)) vector {
  static_assert(N > 0, "hls::vector needs at least one element");

 public:
  vector() = default;
  // Broadcast one value to every element, as the vendor type does.
  explicit vector(const T& value) {
    for (std::size_t i = 0; i < N; ++i) data_[i] = value;
  }

  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }

  static constexpr std::size_t size() { return N; }

 private:
  T data_[N];
};

}  // namespace hls

#endif  // OPTIMUSNIC_HLS_VECTOR_H
