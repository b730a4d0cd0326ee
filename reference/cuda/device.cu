// The CUDA runtime layer (see device.hpp), compiled by nvcc.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "reference/cuda/device.hpp"
#include "reference/core/raise.hpp"

namespace parity::cuda {
namespace {

// Must match parity::DataType and parity::ReduceOp (static_asserts in reference/kernels/buffer_kernels.cpp).
enum Type { kFloat64, kFloat32, kFloat16, kBFloat16, kInt32, kInt64 };
enum Op { kSum, kProd, kMax, kMin, kAvg };

// Fails with the caller's file:line.
void check(cudaError_t rc, const char* call, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (rc != cudaSuccess) raise_error(std::string("CUDA: ") + cudaGetErrorString(rc), call, file, line);
}

int g_device = -1;
cudaStream_t g_stream = nullptr;

cudaStream_t the_stream() {
  if (g_stream == nullptr) raise_error("no CUDA device selected (parity selects one per rank with --device cuda)");
  return g_stream;
}

std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// Launch shape for a grid-stride loop over n elements.
struct Launch {
  unsigned blocks;
  unsigned threads;
};
Launch launch_for(std::size_t n) {
  const unsigned threads = 256;
  const std::size_t wanted = (n + threads - 1) / threads;
  return {static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(wanted, 65535u * 8))), threads};
}

// Values are combined as Wide (float for 16-bit storage, else the type itself).
template <typename T> struct Wide { using type = T; };
template <> struct Wide<__half> { using type = float; };
template <> struct Wide<__nv_bfloat16> { using type = float; };

template <typename T> __device__ typename Wide<T>::type widen(T v) { return v; }
template <> __device__ float widen(__half v) { return __half2float(v); }
template <> __device__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ T narrow(double v) { return static_cast<T>(v); }
template <> __device__ __half narrow(double v) { return __float2half_rn(static_cast<float>(v)); }
template <> __device__ __nv_bfloat16 narrow(double v) { return __float2bfloat16_rn(static_cast<float>(v)); }
template <typename T> __device__ T narrow_float(float v) { return static_cast<T>(v); }
template <> __device__ __half narrow_float(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 narrow_float(float v) { return __float2bfloat16_rn(v); }

template <typename T, int O>
__device__ T combine(T a, T b) {
  using W = typename Wide<T>::type;
  const W x = widen(a), y = widen(b);
  W r;
  if constexpr (O == kSum || O == kAvg) r = x + y;
  else if constexpr (O == kProd) r = x * y;
  else if constexpr (O == kMax) r = x > y ? x : y;
  else r = x < y ? x : y;
  if constexpr (sizeof(W) != sizeof(T)) return narrow_float<T>(r);
  else return r;
}

template <typename T, int O>
__global__ void reduce_kernel(T* out, const T* a, const T* b, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    out[i] = combine<T, O>(a[i], b[i]);
}

// The same on 16-byte vectors (8 16-bit elements, 4 float32, 2 float64): one load per operand
// and one store per 16 bytes, where 2-byte accesses leave 16-bit reductions far under the
// copy bandwidth. The vectors must be 16-byte aligned; reduce() does the ragged ends with
// reduce_kernel.
template <typename T, int O>
__global__ void reduce_vector_kernel(uint4* out, const uint4* a, const uint4* b, std::size_t vectors) {
  constexpr int kPer = sizeof(uint4) / sizeof(T);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < vectors; i += stride) {
    const uint4 va = a[i], vb = b[i];
    T xa[kPer], xb[kPer], r[kPer];
    memcpy(xa, &va, sizeof va);
    memcpy(xb, &vb, sizeof vb);
#pragma unroll
    for (int j = 0; j < kPer; ++j) r[j] = combine<T, O>(xa[j], xb[j]);
    uint4 vr;
    memcpy(&vr, r, sizeof vr);
    out[i] = vr;
  }
}

template <typename T>
__global__ void divide_kernel(T* p, std::size_t n, int divisor) {
  using W = typename Wide<T>::type;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const W r = widen(p[i]) / static_cast<W>(divisor);
    if constexpr (sizeof(W) != sizeof(T)) p[i] = narrow_float<T>(r);
    else p[i] = r;
  }
}

template <typename D, typename S>
__global__ void convert_kernel(D* d, const S* s, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    // float -> half rounds once; everything else goes through double, which holds every value.
    if constexpr (std::is_same<S, float>::value && sizeof(D) == 2) d[i] = narrow_float<D>(s[i]);
    else d[i] = narrow<D>(static_cast<double>(widen(s[i])));
  }
}

template <typename T>
__global__ void fill_kernel(T* d, std::size_t n, T value) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) d[i] = value;
}

template <typename T>
__global__ void scale_kernel(T* p, std::size_t n, typename Wide<T>::type factor) {
  using W = typename Wide<T>::type;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const W r = widen(p[i]) * factor;
    if constexpr (sizeof(W) != sizeof(T)) p[i] = narrow_float<T>(r);
    else p[i] = r;
  }
}

// Each thread counts its elements, then adds its count once.
template <typename T>
__global__ void count_nonfinite_kernel(const T* p, std::size_t n, unsigned long long* count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    if (!isfinite(widen(p[i]))) ++mine;
  if (mine != 0) atomicAdd(count, mine);
}

template <typename F>
void visit_type(int dtype, F&& f) {
  switch (dtype) {
    case kFloat64: f(double{}); return;
    case kFloat32: f(float{}); return;
    case kFloat16: f(__half{}); return;
    case kBFloat16: f(__nv_bfloat16{}); return;
    case kInt32: f(std::int32_t{}); return;
    case kInt64: f(std::int64_t{}); return;
  }
  raise_error("CUDA kernel: unknown data type " + std::to_string(dtype));
}

template <typename T>
T host_narrow(double v) {
  if constexpr (std::is_same<T, __half>::value) return __double2half(v);
  else if constexpr (std::is_same<T, __nv_bfloat16>::value) return __double2bfloat16(v);
  else return static_cast<T>(v);
}

void check_launch(const char* kernel, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  check(cudaGetLastError(), kernel, file, line);
}

}  // namespace

bool compiled_with_cuda() { return true; }

std::vector<DeviceInfo> devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the "no driver" error so later calls are not blamed for it
    return {};
  }
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.push_back({i, prop.name, prop.totalGlobalMem, prop.multiProcessorCount, prop.major, prop.minor});
  }
  return out;
}

std::vector<std::string> device_names() {
  std::vector<std::string> names;
  for (const auto& d : devices()) names.push_back(d.name);
  return names;
}

std::string version_description() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  if (cudaDriverGetVersion(&driver) != cudaSuccess) cudaGetLastError();
  auto text = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  return "CUDA runtime " + text(runtime) + (driver ? ", driver " + text(driver) : ", no driver");
}

void select_device(int index) {
  if (g_device == index) return;
  if (g_stream != nullptr) raise_error("the CUDA device was already selected for this process");
  check(cudaSetDevice(index), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreate");
  g_device = index;
}

int selected_device() { return g_device; }

MemoryInfo memory_info() {
  the_stream();
  MemoryInfo info;
  check(cudaMemGetInfo(&info.free_bytes, &info.total_bytes), "cudaMemGetInfo");
  return info;
}

void* allocate(std::size_t bytes) {
  the_stream();
  void* p = nullptr;
  const cudaError_t rc = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    std::size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    raise_error("cudaMalloc of " + mib(bytes) + " failed (" + cudaGetErrorString(rc) + "); " +
                             mib(free_bytes) + " free of " + mib(total) + " on GPU " + std::to_string(g_device));
  }
  return p;
}

void release(void* pointer) noexcept {
  if (pointer) cudaFree(pointer);
}

void* allocate_pinned(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes == 0 ? 1 : bytes), "cudaMallocHost");
  return p;
}

void release_pinned(void* pointer) noexcept {
  if (pointer) cudaFreeHost(pointer);
}

bool is_device_pointer(const void* pointer) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

void* stream() { return the_stream(); }

void synchronize() { check(cudaStreamSynchronize(the_stream()), "cudaStreamSynchronize"); }

void copy(void* destination, const void* source, std::size_t bytes) {
  if (bytes == 0 || destination == source) return;
  check(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDefault, the_stream()), "cudaMemcpyAsync");
  if (!is_device_pointer(destination) || !is_device_pointer(source)) synchronize();
}

void zero(void* destination, std::size_t bytes) {
  if (bytes) check(cudaMemsetAsync(destination, 0, bytes, the_stream()), "cudaMemsetAsync");
}

void poison(void* destination, std::size_t bytes) {
  if (bytes) check(cudaMemsetAsync(destination, 0xFF, bytes, the_stream()), "cudaMemsetAsync");
}

template <typename T, int O>
void launch_reduce(T* out, const T* a, const T* b, std::size_t count, cudaStream_t s) {
  constexpr std::size_t kPer = sizeof(uint4) / sizeof(T);
  // Elements before the first 16-byte boundary of `out`; a and b must share its alignment.
  const auto misalignment = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % sizeof(uint4); };
  std::size_t head = count;
  if (misalignment(out) == misalignment(a) && misalignment(out) == misalignment(b) &&
      misalignment(out) % sizeof(T) == 0)
    head = std::min(count, (sizeof(uint4) - misalignment(out)) % sizeof(uint4) / sizeof(T));
  const std::size_t vectors = (count - head) / kPer;
  const std::size_t tail = count - head - vectors * kPer;
  if (head) {
    const Launch l = launch_for(head);
    reduce_kernel<T, O><<<l.blocks, l.threads, 0, s>>>(out, a, b, head);
  }
  if (vectors) {
    const Launch l = launch_for(vectors);
    reduce_vector_kernel<T, O><<<l.blocks, l.threads, 0, s>>>(
        reinterpret_cast<uint4*>(out + head), reinterpret_cast<const uint4*>(a + head),
        reinterpret_cast<const uint4*>(b + head), vectors);
  }
  if (tail) {
    const std::size_t at = head + vectors * kPer;
    const Launch l = launch_for(tail);
    reduce_kernel<T, O><<<l.blocks, l.threads, 0, s>>>(out + at, a + at, b + at, tail);
  }
}

void reduce(void* out, const void* a, const void* b, std::size_t count, int dtype, int op) {
  if (count == 0) return;
  cudaStream_t s = the_stream();
  visit_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out);
    const T* x = static_cast<const T*>(a);
    const T* y = static_cast<const T*>(b);
    switch (op) {
      case kSum: case kAvg: launch_reduce<T, kSum>(o, x, y, count, s); break;
      case kProd: launch_reduce<T, kProd>(o, x, y, count, s); break;
      case kMax: launch_reduce<T, kMax>(o, x, y, count, s); break;
      case kMin: launch_reduce<T, kMin>(o, x, y, count, s); break;
      default: raise_error("CUDA reduce: unknown operation " + std::to_string(op));
    }
  });
  check_launch("reduce_kernel");
}

void divide(void* buffer, std::size_t count, int dtype, int n) {
  if (count == 0) return;
  const Launch l = launch_for(count);
  visit_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    divide_kernel<T><<<l.blocks, l.threads, 0, the_stream()>>>(static_cast<T*>(buffer), count, n);
  });
  check_launch("divide_kernel");
}

void convert(void* destination, int destination_dtype, const void* source, int source_dtype, std::size_t count) {
  if (count == 0) return;
  const Launch l = launch_for(count);
  visit_type(destination_dtype, [&](auto dtag) {
    using D = decltype(dtag);
    visit_type(source_dtype, [&](auto stag) {
      using S = decltype(stag);
      convert_kernel<D, S><<<l.blocks, l.threads, 0, the_stream()>>>(static_cast<D*>(destination),
                                                                      static_cast<const S*>(source), count);
    });
  });
  check_launch("convert_kernel");
}

void fill(void* destination, std::size_t count, int dtype, double value) {
  if (count == 0) return;
  const Launch l = launch_for(count);
  visit_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<l.blocks, l.threads, 0, the_stream()>>>(static_cast<T*>(destination), count, host_narrow<T>(value));
  });
  check_launch("fill_kernel");
}

void scale(void* buffer, std::size_t count, int dtype, double factor) {
  if (count == 0) return;
  const Launch l = launch_for(count);
  visit_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral<T>::value) {
      raise_error("scale: integer buffers are not scaled");
    } else {
      using W = typename Wide<T>::type;
      scale_kernel<T><<<l.blocks, l.threads, 0, the_stream()>>>(static_cast<T*>(buffer), count, static_cast<W>(factor));
    }
  });
  check_launch("scale_kernel");
}

std::size_t count_nonfinite(const void* const* buffers, const std::size_t* counts, const int* dtypes, std::size_t n) {
  // Allocated on first use and kept: a mixed-precision step counts every step.
  static unsigned long long* counter = static_cast<unsigned long long*>(allocate(sizeof(unsigned long long)));
  zero(counter, sizeof(unsigned long long));
  for (std::size_t i = 0; i < n; ++i) {
    if (counts[i] == 0) continue;
    const Launch l = launch_for(counts[i]);
    visit_type(dtypes[i], [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_integral<T>::value)
        count_nonfinite_kernel<T><<<l.blocks, l.threads, 0, the_stream()>>>(static_cast<const T*>(buffers[i]), counts[i],
                                                                            counter);
    });
    check_launch("count_nonfinite_kernel");
  }
  unsigned long long found = 0;
  copy(&found, counter, sizeof found);  // to the host: waits
  return static_cast<std::size_t>(found);
}

Event::Event() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreate(&e), "cudaEventCreate");
  event_ = e;
}

Event::~Event() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

void Event::record() { check(cudaEventRecord(static_cast<cudaEvent_t>(event_), the_stream()), "cudaEventRecord"); }

bool Event::done() const {
  const cudaError_t rc = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (rc == cudaErrorNotReady) return false;
  check(rc, "cudaEventQuery");
  return true;
}

void Event::wait() const { check(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), "cudaEventSynchronize"); }

double Event::elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.event_), static_cast<cudaEvent_t>(stop.event_)),
        "cudaEventElapsedTime");
  return ms;
}

}  // namespace parity::cuda
