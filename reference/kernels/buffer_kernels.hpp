// Kernels that reference collective algorithms apply to data they receive, on host buffers here
// and on device buffers through reference/cuda/device.hpp (chosen by the buffers' memory
// space). float16 and bfloat16 are combined in float32 and rounded back after each operation
// ("native" 16-bit arithmetic: every partial result is a 16-bit number).
#pragma once

#include <vector>

#include "reference/core/buffer.hpp"

namespace parity {

// acc[i] = acc[i] (op) in[i]; avg accumulates like sum (see finish_average).
void reduce_into(BufferView acc, BufferView in, ReduceOp op);
// out[i] = a[i] (op) b[i]; out may alias a or b.
void reduce_to(BufferView out, BufferView a, BufferView b, ReduceOp op);
// buf[i] /= n, the last step of an average (integers truncate toward zero).
void finish_average(BufferView buf, int n);
// dst = src element by element; sizes and types must match.
void copy_buffer(BufferView dst, BufferView src);
// Converts between any two types (used to widen 16-bit data to float32 and narrow it back).
void convert_buffer(BufferView dst, BufferView src);
// dst = src for buffers of the same count and type in any two memory spaces.
void copy_between_spaces(BufferView dst, BufferView src);
// buf[i] *= factor in the type's arithmetic (float32 for 16-bit types), each result rounded
// once; exact for a power-of-two factor while the results stay normal numbers (loss scaling).
void scale_buffer(BufferView buf, double factor);
// How many elements of the buffers are inf or NaN (0 for integer types). The device buffers
// are counted together and read once (one wait).
std::size_t count_nonfinite(const std::vector<BufferView>& bufs);
inline std::size_t count_nonfinite(BufferView buf) { return count_nonfinite(std::vector<BufferView>{buf}); }
// Copies bytes between any two memory spaces.
void copy_bytes(void* dst, MemorySpace dst_space, const void* src, MemorySpace src_space, std::size_t bytes);

}  // namespace parity
