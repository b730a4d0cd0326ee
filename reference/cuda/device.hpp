// The CUDA runtime as parity uses it: devices, memory, one stream per process, events for
// timing, and the element-wise kernels that tensors and the reference collective algorithms
// apply to device buffers. Compiled with nvcc where it is found; elsewhere the stubs report no
// device and every other call throws, so the rest of parity needs no #ifdefs.
//
// Ordering: every kernel, copy and NCCL call of a process goes on one stream (stream()), so
// they run in the order issued; the host waits only where it reads results (copies to host
// memory, synchronize(), events). Kept to C++17 and the standard library so that nvcc
// compiles it with any host compiler; data types and reductions are passed as the integer
// values of parity::DataType and parity::ReduceOp (checked in reference/kernels/buffer_kernels.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace parity::cuda {

bool compiled_with_cuda();

struct DeviceInfo {
  int index = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  std::size_t total_bytes = 0;
  int multiprocessors = 0;
  int major = 0, minor = 0;  // compute capability
};
// Visible GPUs; empty without a driver or device (never throws).
std::vector<DeviceInfo> devices();
std::vector<std::string> device_names();
// "CUDA runtime 13.0, driver 13.0" (empty without CUDA).
std::string version_description();
// cuBLAS's words for a status (cublasGetStatusString) through the libraries opened on first use
// (blas.hpp): opens them, GPU or not. Throws Error without CUDA or when they cannot be opened.
std::string blas_status_words(int status);

// Makes `index` this process's device (cudaSetDevice) and creates its stream.
void select_device(int index);
// The selected device, or -1 before select_device().
int selected_device();
struct MemoryInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};
MemoryInfo memory_info();  // of the selected device

// Device memory (cudaMalloc); a failed allocation throws naming the bytes and the free memory.
void* allocate(std::size_t bytes);
void release(void* pointer) noexcept;
// Page-locked host memory (cudaMallocHost), for staging device buffers through MPI.
void* allocate_pinned(std::size_t bytes);
void release_pinned(void* pointer) noexcept;
// True when pointer is device memory (or managed) as seen by the runtime.
bool is_device_pointer(const void* pointer);

// The process's stream (a cudaStream_t), created by select_device().
void* stream();
// Waits for everything issued on the stream.
void synchronize();
// Copies bytes in any direction (unified addressing) on the stream; a copy that involves host
// memory waits for the stream, so the host data is ready (or free to reuse) on return.
void copy(void* destination, const void* source, std::size_t bytes);
// Sets bytes to zero on the stream.
void zero(void* destination, std::size_t bytes);
// Writes the byte pattern 0xFF over bytes (NaN for every floating type): poison for tests.
void poison(void* destination, std::size_t bytes);

// Element-wise kernels on device buffers of `count` elements of type `dtype`.
// out = a (op) b; out may alias a or b. 16-bit types combine in float32 and round once.
void reduce(void* out, const void* a, const void* b, std::size_t count, int dtype, int op);
// buf /= n (integers truncate toward zero), the last step of an average.
void divide(void* buffer, std::size_t count, int dtype, int n);
// dst = src converted between any two types (half types round to nearest even).
void convert(void* destination, int destination_dtype, const void* source, int source_dtype, std::size_t count);
// Every element set to value (rounded to the type).
void fill(void* destination, std::size_t count, int dtype, double value);
// buf *= factor in float32 for 16-bit types (the type itself otherwise), rounded once; floating
// types only.
void scale(void* buffer, std::size_t count, int dtype, double factor);
// Elements that are inf or NaN (0 for integer types) over n buffers, counted into one device
// counter kept for the process and read once: one wait for the stream, however many buffers.
std::size_t count_nonfinite(const void* const* buffers, const std::size_t* counts, const int* dtypes, std::size_t n);

// An event on the stream; elapsed time between two in milliseconds (cudaEventElapsedTime).
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record();
  // True once the work before record() has finished (cudaEventQuery; never blocks).
  bool done() const;
  void wait() const;
  static double elapsed_ms(const Event& start, const Event& stop);

 private:
  void* event_ = nullptr;
};

}  // namespace parity::cuda
