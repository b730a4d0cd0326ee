// The fast path in a parity built without CUDA: every op and the GPT refuse with one line.
#include "reference/core/raise.hpp"
#include "reference/fast/gpt.hpp"

namespace parity::fast {
namespace {
[[noreturn]] void refuse() { raise_error("the fast path needs parity built with CUDA (nvcc was not found when it was configured)"); }
}  // namespace

bool compiled() { return false; }
AttentionKernels attention_kernels(int) { return AttentionKernels::mma; }
std::int64_t matmul_flops_issued() { return 0; }
std::int64_t epilogue_fallbacks() { return 0; }
void linear_forward(Storage, const void*, const void*, const void*, void*, void*, std::int64_t, std::int64_t, std::int64_t, Epilogue) { refuse(); }
void linear_backward_input(Storage, const void*, const void*, void*, const void*, std::int64_t, std::int64_t, std::int64_t, Epilogue) { refuse(); }
void linear_backward_weight(Storage, const void*, const void*, void*, void*, std::int64_t, std::int64_t, std::int64_t, bool) { refuse(); }
void head_forward(Storage, const void*, const void*, void*, std::int64_t, std::int64_t, std::int64_t) { refuse(); }
void head_backward_input(Storage, const void*, const void*, void*, std::int64_t, std::int64_t, std::int64_t) { refuse(); }
void head_backward_table(Storage, const void*, const void*, float*, std::int64_t, std::int64_t, std::int64_t) { refuse(); }
void attention_forward(Storage, const void*, void*, float*, int, int, int, int) { refuse(); }
void attention_backward(Storage, const void*, const void*, const void*, const float*, float*, void*, int, int, int, int) { refuse(); }
void attention_forward(Storage, const void*, void*, float*, int, int, int, int, AttentionKernels) { refuse(); }
void attention_backward(Storage, const void*, const void*, const void*, const float*, float*, void*, int, int, int, int, AttentionKernels) { refuse(); }
void embedding_forward(Storage, const std::int32_t*, const void*, const void*, float*, std::int64_t, std::int64_t, std::int64_t) { refuse(); }
void residual_layernorm_forward(Storage, const float*, const void*, float*, const void*, const void*, void*, float*, float*, std::int64_t, std::int64_t) { refuse(); }
void layernorm_backward(Storage, const float*, const float*, const float*, const void*, const void*, float*, void*, float*, std::int64_t, std::int64_t) { refuse(); }
void layernorm_param_grads(Storage, const float*, void*, void*, std::int64_t, std::int64_t) { refuse(); }
void embedding_backward(Storage, const float*, const std::int32_t*, const std::int32_t*, const std::int32_t*, std::int64_t, void*, float*, std::int64_t, std::int64_t, std::int64_t) { refuse(); }
void cross_entropy(Storage, void*, const std::int32_t*, float*, std::int64_t, std::int64_t, std::int64_t, float, float) { refuse(); }
void sum(const float*, float*, std::int64_t) { refuse(); }
void adamw(Storage, void*, float*, float*, float*, const void*, const float*, std::int64_t, std::int64_t, const AdamWHyper&, int, float, const int*) { refuse(); }
void find_nonfinite(Storage, const void*, std::int64_t, const float*, std::int64_t, int*) { refuse(); }
void to_storage(Storage, const float*, void*, std::int64_t) { refuse(); }
void from_storage(Storage, const void*, float*, std::int64_t) { refuse(); }
void normal_init(Storage, void*, float*, std::int64_t, float, std::uint64_t) { refuse(); }
void fill(Storage, void*, float*, std::int64_t, float) { refuse(); }
void multiply(Storage, void*, std::int64_t, bool, float, void*) { refuse(); }

struct Gpt::State {};
Gpt::Gpt(const GptShape&, Storage, const AdamWHyper&, std::uint64_t) { refuse(); }
Gpt::~Gpt() = default;
const GptShape& Gpt::shape() const { refuse(); }
Storage Gpt::storage() const { refuse(); }
void Gpt::set_parameter(const std::string&, const std::vector<float>&) { refuse(); }
std::vector<float> Gpt::parameter(const std::string&) const { refuse(); }
std::vector<float> Gpt::gradient(const std::string&) const { refuse(); }
StepResult Gpt::step(const std::int32_t*, const std::int32_t*, bool) { refuse(); }
int Gpt::updates() const { refuse(); }
float Gpt::loss_scale() const { refuse(); }
void Gpt::set_profiling(bool) { refuse(); }
void Gpt::set_gradient_sync(GradientSync*) { refuse(); }
StepParts Gpt::last_parts() const { refuse(); }

}  // namespace parity::fast
