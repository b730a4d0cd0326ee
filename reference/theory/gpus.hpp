// GPUs' datasheet peaks, the denominators of model FLOPs utilisation (MFU) and of bandwidth
// fractions: dense (no sparsity) tensor-core rates per type, the non-tensor FP32 FMA rate and
// HBM bandwidth, as NVIDIA publishes them, and the lookup from the device name CUDA reports.
#pragma once

#include <string>
#include <vector>

#include "reference/core/dtype.hpp"

namespace parity::theory {

struct GpuPeaks {
  const char* name;         // "H100 SXM"
  double bfloat16_TFLOPs;   // dense (no sparsity) tensor-core rate
  double float16_TFLOPs;    // dense
  double tf32_TFLOPs;       // dense
  double float32_TFLOPs;    // non-tensor FMA rate
  double float64_TFLOPs;    // tensor-core FP64
  double memory_GBps;       // HBM bandwidth
  const char* source;       // the datasheet it comes from
};

// Every GPU of the table: A100 SXM 80GB, A100 PCIe 80GB, H100 SXM, H100 PCIe, H100 NVL, H200 SXM.
const std::vector<GpuPeaks>& gpu_peaks();

// The table's row for a CUDA device name as cudaGetDeviceProperties reports it, matched
// case-insensitively on the model number as a word ("h200" in "NVIDIA H200", not in "GH200";
// "a100" not in "RTX A1000"), H200 before H100, PCIe and NVL before the SXM default:
// "NVIDIA H100 80GB HBM3" -> H100 SXM, "NVIDIA H100 PCIe" -> H100 PCIe, "NVIDIA H100 NVL" ->
// H100 NVL, "NVIDIA H200" -> H200 SXM, "NVIDIA A100-SXM4-80GB" / "NVIDIA A100-SXM4-40GB" ->
// A100 SXM, "NVIDIA A100-PCIE-40GB" / "NVIDIA A100 80GB PCIe" -> A100 PCIe (the 40GB parts share
// their 80GB row's compute; their HBM2 is slower, 1555 GB/s, than the row's memory_GBps).
// nullptr for a name it does not know.
const GpuPeaks* find_gpu_peaks(const std::string& device_name);

// The dense peak for a type in FLOP/s: bfloat16 and float16 their tensor-core rates, float32
// the FMA rate, float64 the tensor-core FP64 rate; NaN for types without one (the integers).
double peak_flops(const GpuPeaks& gpu, DataType dtype);

}  // namespace parity::theory
