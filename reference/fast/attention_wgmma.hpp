// Hopper's attention kernels (attention_wgmma.cu), chosen by attention.cu where they run: head
// sizes 64 and 128 on a GPU of compute capability 9.0. The same contract as attention_forward
// and attention_backward (ops.hpp); the backward here runs after attention.cu's delta kernel.
#pragma once

#include "reference/fast/ops.hpp"

namespace parity::fast::detail {

void wgmma_attention_forward(Storage s, const void* qkv, void* out, float* lse, int B, int T, int C, int H);
void wgmma_attention_backward(Storage s, const void* dout, const void* qkv, const float* lse, const float* delta,
                              void* dqkv, int B, int T, int C, int H);

}  // namespace parity::fast::detail
