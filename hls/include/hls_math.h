// hls_math.h: the subset of the Vitis HLS math library our generated kernels use, for C simulation
// with g++ (written for OptimusNIC). Only functions whose vendor versions are correctly rounded
// IEEE-754 operations are provided, so the simulation computes what the golden model computes.
#ifndef OPTIMUSNIC_HLS_MATH_H
#define OPTIMUSNIC_HLS_MATH_H

#include <cmath>

namespace hls {

// Single-precision square root, correctly rounded (IEEE-754 squareRoot); sqrt(-x) is NaN.
inline float sqrt(float x) { return std::sqrt(x); }
inline float sqrtf(float x) { return std::sqrt(x); }

}  // namespace hls

#endif  // OPTIMUSNIC_HLS_MATH_H
