// Vectorised CPU loops (Google Highway), compiled for every x86 and Arm instruction set Highway
// targets and chosen at run time for the CPU at hand, so one build runs everywhere at its best.
// Each function equals its scalar reference (reference/ops, reference/core/half.hpp) in what it
// promises: the 16-bit conversions bit for bit (round to nearest even, NaNs kept quiet with
// their sign); GeLU with Highway's exp (at most 1 ulp, as libm's), the rest of the formula in the
// scalar code's order of operations. No function reduces, so nothing depends on the vector width.
#pragma once

#include <cstddef>
#include <cstdint>

namespace parity::simd {

// GeLU in its tanh form written with exp: y = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715
// x^3); dx = dy (s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 0.044715 x^2)), s = 1 / (1 + exp(-2u)).
void gelu_forward(const float* x, float* y, std::size_t n);
void gelu_forward(const double* x, double* y, std::size_t n);
void gelu_backward(const float* dy, const float* x, float* dx, std::size_t n);
void gelu_backward(const double* dy, const double* x, double* dx, std::size_t n);

// 16-bit storage (IEEE binary16 and bfloat16 as their bit patterns) to and from float32.
void half_to_float(const std::uint16_t* in, float* out, std::size_t n);
void float_to_half(const float* in, std::uint16_t* out, std::size_t n);
void bf16_to_float(const std::uint16_t* in, float* out, std::size_t n);
void float_to_bf16(const float* in, std::uint16_t* out, std::size_t n);

// The instruction set the functions run with on this CPU (e.g. "AVX3", "AVX2", "SSE4").
const char* target();

}  // namespace parity::simd
