// hls_vector.h: stands in for AMD Vitis HLS's `hls_vector.h` (not published on PyPI), for C
// simulation with g++; written for OptimusNIC, behaviour follows the documented Vitis HLS API.
// Subset: `hls::vector<T, N>`, default and broadcast construction, operator[], size().
//
// A fixed-size array of N elements that HLS maps to one wide word (16 x float = one 512-bit beat).
// Aligned as the vendor type: to the greatest power of two dividing sizeof(T) * N (64 bytes for a
// 512-bit beat), so the compiler may use aligned vector loads on it; the simulation harness hands
// the kernel buffers aligned to that (hls/csim_harness/optimusnic_csim_host.h).
//
// Speed: when the vector is a power-of-two number of bytes up to 64 (every beat type of the
// kernels), its elements are stored as one GCC vector-extension word, so g++ copies, selects and
// returns it as one SIMD register, like the wide word it is in hardware. As a plain array, a
// vector returned by value from a branch (hls::stream::read: the front element, or a
// value-initialised one when empty) was rebuilt from 16 scalar loads and shuffles on every read.
// The elements, their order and their values are the same either way.
#ifndef OPTIMUSNIC_HLS_VECTOR_H
#define OPTIMUSNIC_HLS_VECTOR_H

#include <cstddef>

namespace hls {

namespace details {

// The greatest power of two that divides n (the vendor header's rule for the vector's alignment).
constexpr std::size_t gp2(std::size_t n) { return n == 0 ? 0 : (n % 2 ? 1 : 2 * gp2(n / 2)); }

// The element storage: a plain array in general ...
template <typename T, std::size_t N, bool Word = (gp2(sizeof(T) * N) == sizeof(T) * N && sizeof(T) * N <= 64)>
struct storage {
  T elems[N];
  T* data() { return elems; }
  const T* data() const { return elems; }
};

// ... and one vector-extension word when it is 2^k bytes, at most 64 (GCC lets a vector be
// accessed through pointers to its element type).
template <typename T, std::size_t N>
struct storage<T, N, true> {
  typedef T word_type __attribute__((vector_size(sizeof(T) * N)));
  word_type word;
  T* data() { return reinterpret_cast<T*>(&word); }
  const T* data() const { return reinterpret_cast<const T*>(&word); }
};

}  // namespace details

template <typename T, std::size_t N>
class alignas(details::gp2(sizeof(T) * N)) vector {
  static_assert(N > 0, "hls::vector needs at least one element");

 public:
  vector() = default;
  // Broadcast one value to every element, as the vendor type does.
  explicit vector(const T& value) {
    for (std::size_t i = 0; i < N; ++i) s_.data()[i] = value;
  }

  T& operator[](std::size_t i) { return s_.data()[i]; }
  const T& operator[](std::size_t i) const { return s_.data()[i]; }

  static constexpr std::size_t size() { return N; }

 private:
  details::storage<T, N> s_;
};

}  // namespace hls

#endif  // OPTIMUSNIC_HLS_VECTOR_H
