// ap_int.h: stands in for AMD's `ap_int.h` (AMD publishes its own, Apache-2.0, in the hls4ml wheel:
// the default for C simulation; this one serves `optimusnic csim --headers own`), for C simulation
// with g++; written for OptimusNIC, behaviour follows the documented Vitis HLS API.
//
// Subset of `ap_uint<W>`: unsigned values of up to 1024 bits stored as 64-bit words, construction
// from an integer (negative values sign-extend, so `= -1` sets every bit), bit-range reads and
// writes of at most 64 bits through `range(hi, lo)`, `to_uint()` / `to_uint64()`, and equality.
#ifndef OPTIMUSNIC_AP_INT_H
#define OPTIMUSNIC_AP_INT_H

#include <cstdint>

template <int W>
class ap_uint {
  static_assert(W >= 1 && W <= 1024, "this ap_uint subset supports 1 to 1024 bits");

 public:
  static constexpr int kWords = (W + 63) / 64;

  class range_ref {
   public:
    range_ref(ap_uint& ref, int hi, int lo) : ref_(ref), hi_(hi), lo_(lo) {}
    range_ref& operator=(std::uint64_t value) {
      ref_.set_range(hi_, lo_, value);
      return *this;
    }
    std::uint64_t to_uint64() const { return ref_.get_range(hi_, lo_); }
    unsigned int to_uint() const { return static_cast<unsigned int>(to_uint64()); }
    operator std::uint64_t() const { return to_uint64(); }

   private:
    ap_uint& ref_;
    int hi_;
    int lo_;
  };

  class const_range_ref {
   public:
    const_range_ref(const ap_uint& ref, int hi, int lo) : ref_(ref), hi_(hi), lo_(lo) {}
    std::uint64_t to_uint64() const { return ref_.get_range(hi_, lo_); }
    unsigned int to_uint() const { return static_cast<unsigned int>(to_uint64()); }
    operator std::uint64_t() const { return to_uint64(); }

   private:
    const ap_uint& ref_;
    int hi_;
    int lo_;
  };

  ap_uint() { clear(); }
  ap_uint(long long value) { assign(static_cast<std::uint64_t>(value), value < 0); }
  ap_uint(unsigned long long value) { assign(value, false); }
  ap_uint(long value) { assign(static_cast<std::uint64_t>(value), value < 0); }
  ap_uint(unsigned long value) { assign(value, false); }
  ap_uint(int value) { assign(static_cast<std::uint64_t>(static_cast<long long>(value)), value < 0); }
  ap_uint(unsigned int value) { assign(value, false); }
  ap_uint(bool value) { assign(value ? 1u : 0u, false); }

  range_ref range(int hi, int lo) { return range_ref(*this, hi, lo); }
  const_range_ref range(int hi, int lo) const { return const_range_ref(*this, hi, lo); }

  std::uint64_t to_uint64() const { return words_[0]; }
  unsigned int to_uint() const { return static_cast<unsigned int>(words_[0]); }
  bool to_bool() const { return (words_[0] & 1u) != 0; }
  operator std::uint64_t() const { return words_[0]; }

  bool operator==(const ap_uint& other) const {
    for (int i = 0; i < kWords; ++i)
      if (words_[i] != other.words_[i]) return false;
    return true;
  }
  bool operator!=(const ap_uint& other) const { return !(*this == other); }

  std::uint64_t get_range(int hi, int lo) const {
    const int width = hi - lo + 1;  // 1..64, within W
    const int word = lo / 64;
    const int shift = lo % 64;
    std::uint64_t value = words_[word] >> shift;
    if (shift && word + 1 < kWords) value |= words_[word + 1] << (64 - shift);
    return width == 64 ? value : value & ((std::uint64_t{1} << width) - 1);
  }

  void set_range(int hi, int lo, std::uint64_t value) {
    const int width = hi - lo + 1;
    const std::uint64_t mask = width == 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << width) - 1);
    value &= mask;
    const int word = lo / 64;
    const int shift = lo % 64;
    words_[word] = (words_[word] & ~(mask << shift)) | (value << shift);
    if (shift && shift + width > 64 && word + 1 < kWords) {
      const int spill = 64 - shift;
      words_[word + 1] = (words_[word + 1] & ~(mask >> spill)) | (value >> spill);
    }
    trim();
  }

 private:
  void clear() {
    for (int i = 0; i < kWords; ++i) words_[i] = 0;
  }
  void assign(std::uint64_t low, bool negative) {
    words_[0] = low;
    for (int i = 1; i < kWords; ++i) words_[i] = negative ? ~std::uint64_t{0} : 0;
    trim();
  }
  void trim() {
    if (W % 64) words_[kWords - 1] &= (std::uint64_t{1} << (W % 64)) - 1;
  }

  std::uint64_t words_[kWords];
};

#endif  // OPTIMUSNIC_AP_INT_H
