// Built instead of device.cu when CUDA is off or nvcc is not found: no devices, and every call
// that would need one says how to get a CUDA build.
#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"

namespace parity::cuda {
namespace {
[[noreturn]] void no_cuda() {
  throw Error("this parity was built without CUDA (configure with nvcc on PATH or -DPARITY_CUDA=ON)");
}
}  // namespace

bool compiled_with_cuda() { return false; }
std::vector<DeviceInfo> devices() { return {}; }
std::vector<std::string> device_names() { return {}; }
std::string version_description() { return ""; }
std::string blas_status_words(int) { no_cuda(); }
void select_device(int) { no_cuda(); }
int selected_device() { return -1; }
MemoryInfo memory_info() { no_cuda(); }
void* allocate(std::size_t) { no_cuda(); }
void release(void*) noexcept {}
void* allocate_pinned(std::size_t) { no_cuda(); }
void release_pinned(void*) noexcept {}
bool is_device_pointer(const void*) { return false; }
void* stream() { no_cuda(); }
void synchronize() { no_cuda(); }
void copy(void*, const void*, std::size_t) { no_cuda(); }
void zero(void*, std::size_t) { no_cuda(); }
void poison(void*, std::size_t) { no_cuda(); }
void reduce(void*, const void*, const void*, std::size_t, int, int) { no_cuda(); }
void divide(void*, std::size_t, int, int) { no_cuda(); }
void convert(void*, int, const void*, int, std::size_t) { no_cuda(); }
void fill(void*, std::size_t, int, double) { no_cuda(); }
void scale(void*, std::size_t, int, double) { no_cuda(); }
std::size_t count_nonfinite(const void* const*, const std::size_t*, const int*, std::size_t) { no_cuda(); }

Event::Event() { no_cuda(); }
Event::~Event() = default;
void Event::record() { no_cuda(); }
bool Event::done() const { no_cuda(); }
void Event::wait() const { no_cuda(); }
double Event::elapsed_ms(const Event&, const Event&) { no_cuda(); }

}  // namespace parity::cuda
