// hls_math.h: stands in for AMD Vitis HLS's `hls_math.h` (not published on PyPI: hls4ml ships a
// stub of its own without hls::sqrt, which this header shadows), for C simulation with g++;
// written for OptimusNIC. Subset: `hls::sqrt` / `hls::sqrtf` on float. Only functions whose
// vendor versions are correctly rounded IEEE-754 operations are provided, so the simulation
// computes what the golden model computes.
#ifndef OPTIMUSNIC_HLS_MATH_H
#define OPTIMUSNIC_HLS_MATH_H

#include <cmath>

namespace hls {

// Single-precision square root, correctly rounded (IEEE-754 squareRoot); sqrt(-x) is NaN.
inline float sqrt(float x) { return std::sqrt(x); }
inline float sqrtf(float x) { return std::sqrt(x); }

}  // namespace hls

#endif  // OPTIMUSNIC_HLS_MATH_H
