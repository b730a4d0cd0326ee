// GPUs' datasheet peaks (gpus.hpp).
#include "reference/theory/gpus.hpp"

#include <cctype>
#include <limits>

namespace parity::theory {

namespace {

constexpr const char* kA100 = "NVIDIA A100 Tensor Core GPU datasheet (2021)";
constexpr const char* kH100 = "NVIDIA H100 Tensor Core GPU datasheet (2023)";
constexpr const char* kH200 = "NVIDIA H200 Tensor Core GPU product brief (2024)";

// Whether `lower` holds `token` as a word: not preceded by a letter or digit ("gh200" is not
// "h200"), not followed by a digit ("a1000" is not "a100").
bool has_model(const std::string& lower, const std::string& token) {
  for (std::size_t at = lower.find(token); at != std::string::npos; at = lower.find(token, at + 1)) {
    const bool start = at == 0 || !std::isalnum(static_cast<unsigned char>(lower[at - 1]));
    const std::size_t after = at + token.size();
    const bool end = after == lower.size() || !std::isdigit(static_cast<unsigned char>(lower[after]));
    if (start && end) return true;
  }
  return false;
}

const GpuPeaks* row(const char* name) {
  for (const GpuPeaks& g : gpu_peaks())
    if (std::string(g.name) == name) return &g;
  return nullptr;
}

}  // namespace

// Dense figures: half the datasheets' "with sparsity" tensor rates.
const std::vector<GpuPeaks>& gpu_peaks() {
  static const std::vector<GpuPeaks> table{
      //  name            bf16   fp16   tf32   fp32  fp64   GB/s
      {"A100 SXM", 312.0, 312.0, 156.0, 19.5, 19.5, 2039.0, kA100},
      {"A100 PCIe", 312.0, 312.0, 156.0, 19.5, 19.5, 1935.0, kA100},
      {"H100 SXM", 989.4, 989.4, 494.7, 66.9, 66.9, 3350.0, kH100},
      {"H100 PCIe", 756.5, 756.5, 378.0, 51.2, 51.2, 2000.0, kH100},
      {"H100 NVL", 835.5, 835.5, 417.5, 60.0, 60.0, 3900.0, kH100},
      {"H200 SXM", 989.4, 989.4, 494.7, 66.9, 66.9, 4800.0, kH200},
  };
  return table;
}

const GpuPeaks* find_gpu_peaks(const std::string& device_name) {
  std::string lower = device_name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool pcie = lower.find("pcie") != std::string::npos;
  if (has_model(lower, "h200")) return row("H200 SXM");
  if (has_model(lower, "h100")) {
    if (pcie) return row("H100 PCIe");
    if (lower.find("nvl") != std::string::npos) return row("H100 NVL");
    return row("H100 SXM");
  }
  if (has_model(lower, "a100")) return row(pcie ? "A100 PCIe" : "A100 SXM");
  return nullptr;
}

double peak_flops(const GpuPeaks& gpu, DataType dtype) {
  switch (dtype) {
    case DataType::bfloat16: return gpu.bfloat16_TFLOPs * 1e12;
    case DataType::float16: return gpu.float16_TFLOPs * 1e12;
    case DataType::float32: return gpu.float32_TFLOPs * 1e12;
    case DataType::float64: return gpu.float64_TFLOPs * 1e12;
    case DataType::int32: case DataType::int64: break;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace parity::theory
