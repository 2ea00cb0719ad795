// hls_vector.h: the subset of Vitis HLS `hls::vector` our generated kernels use, for C simulation
// with g++ (written for OptimusNIC; behaviour follows the documented Vitis HLS API).
//
// A fixed-size array of N elements that HLS maps to one wide word (16 x float = one 512-bit beat).
// Unlike the vendor header this one is NOT over-aligned: the C simulation library runs the kernel
// in place on numpy buffers, which are only guaranteed element alignment.
#ifndef OPTIMUSNIC_HLS_VECTOR_H
#define OPTIMUSNIC_HLS_VECTOR_H

#include <cstddef>

namespace hls {

template <typename T, std::size_t N>
class vector {
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
