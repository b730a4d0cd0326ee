// CUDA ops (see cuda.hpp): the checks shared with the CPU ops (reference/ops/checks.hpp), the
// device placement check, scratch tensors on the device, and calls of the launch functions of
// cuda_kernels.hpp (implemented by cuda_kernels.cu, or by cuda_stub.cpp without CUDA).
#include "reference/ops/cuda.hpp"

#include <atomic>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>

#include "reference/core/error.hpp"
#include "reference/ops/checks.hpp"
#include "reference/ops/cuda_kernels.hpp"
#include "reference/ops/flops.hpp"

namespace parity::ops::cuda {

// The launch functions take parity::DataType as an integer.
static_assert(static_cast<int>(DataType::float64) == kernels::kFloat64 &&
              static_cast<int>(DataType::float32) == kernels::kFloat32 &&
              static_cast<int>(DataType::float16) == kernels::kFloat16 &&
              static_cast<int>(DataType::bfloat16) == kernels::kBFloat16 &&
              static_cast<int>(DataType::int32) == kernels::kInt32 &&
              static_cast<int>(DataType::int64) == kernels::kInt64);

namespace {

std::atomic<bool> g_allow_tf32{false};

int code(const Tensor& t) { return static_cast<int>(t.dtype()); }
int code(DataType t) { return static_cast<int>(t); }

// Every allocated tensor the op touches must be in device memory (unallocated optional tensors
// are checked, or skipped, by the op).
void require_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && t->space() != MemorySpace::cuda)
      fail(op, t->describe() + " is in host memory; the CUDA op needs every tensor on the device " +
                   "(Tensor::to(MemorySpace::cuda, ...))");
}

void require_floating(const char* op, const Tensor& t) {
  require_defined(op, t, "input");
  if (!is_floating(t.dtype())) fail(op, t.describe() + ": needs a floating-point tensor");
}

// A scratch tensor on the device, charged to workspace.
Tensor scratch(const std::string& name, Shape shape, DataType dtype) {
  return Tensor::empty(name, std::move(shape), dtype, MemoryCategory::workspace, MemorySpace::cuda);
}

// Position of the first index outside [0, limit) in a device index tensor, or -1 (waits).
std::int64_t first_invalid(const Tensor& indices, std::int64_t limit) {
  Tensor found = scratch(indices.name() + ".check", {1}, DataType::int64);
  return kernels::first_invalid_index(indices.raw(), code(indices), indices.numel(), limit, found.raw());
}

// The element-wise ops: y = f(first, rest...) with every tensor of first's shape and type.
template <typename... Rest>
void check_elementwise(const char* op, const Tensor& y, const Tensor& first, const Rest&... rest) {
  require_defined(op, first, "input");
  (same_shape(op, first, rest), ...);
  same_shape(op, first, y);
  require_device(op, {&first, &rest..., &y});
  require_floating(op, first);
}

}  // namespace

void set_tf32(bool allow) { g_allow_tf32.store(allow); }
bool tf32() { return g_allow_tf32.load(); }

void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, bool accumulate) {
  const char* op = "matmul";
  require_defined(op, a, "a");
  same_type(op, a, b);
  same_type(op, a, c);
  require_device(op, {&a, &b, &c});
  require_floating(op, a);
  if (a.rank() != 2 || b.rank() != 2 || c.rank() != 2)
    fail(op, a.describe() + ", " + b.describe() + ", " + c.describe() + ": matrices must be 2-D");
  const std::int64_t m = transpose_a ? a.dim(1) : a.dim(0), k = transpose_a ? a.dim(0) : a.dim(1);
  const std::int64_t kb = transpose_b ? b.dim(1) : b.dim(0), n = transpose_b ? b.dim(0) : b.dim(1);
  if (k != kb)
    fail(op, a.describe() + (transpose_a ? " (transposed)" : "") + " times " + b.describe() +
                 (transpose_b ? " (transposed)" : "") + ": inner dimensions " + std::to_string(k) + " and " +
                 std::to_string(kb) + " differ");
  require_shape(op, c, {m, n});
  if (c.raw() == a.raw() || c.raw() == b.raw())
    fail(op, "output " + c.describe() + " shares storage with an input (" + a.describe() + ", " + b.describe() + ")");
  const int M = blas_int(op, m), N = blas_int(op, n), K = blas_int(op, k);
  const int lda = blas_int(op, a.dim(1)), ldb = blas_int(op, b.dim(1));
  kernels::matmul(code(a), transpose_a, transpose_b, M, N, K, a.raw(), lda, b.raw(), ldb, c.raw(), N, accumulate,
                  tf32());
  flop_counter().matmul += 2LL * M * N * K;
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y) {
  const char* op = "linear_forward";
  require_defined(op, x, "x");
  require_defined(op, w, "w");
  require_device(op, {&x, &w, &bias, &y});
  if (w.rank() != 2) fail(op, "weight " + w.describe() + " must be 2-D [in, out]");
  if (x.dim(-1) != w.dim(0))
    fail(op, "input " + x.describe() + " has last dimension " + std::to_string(x.dim(-1)) + " but weight " +
                 w.describe() + " expects " + std::to_string(w.dim(0)));
  same_type(op, x, w);
  Shape out_shape = x.shape();
  out_shape.back() = w.dim(1);
  require_shape(op, y, out_shape);
  same_type(op, x, y);
  require_floating(op, x);
  const std::int64_t n = rows_of(x);
  Tensor y2 = y.reshape({n, w.dim(1)});
  if (bias.defined()) {
    same_type(op, w, bias);
    require_shape(op, bias, {w.dim(1)});
    kernels::broadcast_rows(code(y), bias.raw(), y2.raw(), n, w.dim(1));
  }
  matmul(x.reshape({n, x.dim(-1)}), false, w, false, y2, bias.defined());
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias) {
  const char* op = "linear_backward";
  require_defined(op, dy, "dy");
  require_defined(op, x, "x");
  require_defined(op, w, "w");
  require_device(op, {&dy, &x, &w, &dx, &dw, &dbias});
  if (dy.dim(-1) != w.dim(1) || x.dim(-1) != w.dim(0) || rows_of(dy) != rows_of(x))
    fail(op, "gradient " + dy.describe() + ", input " + x.describe() + " and weight " + w.describe() + " do not match");
  const std::int64_t n = rows_of(x);
  const Tensor dy2 = dy.reshape({n, w.dim(1)});
  if (dx.defined()) {
    require_shape(op, dx, x.shape());
    Tensor dx2 = dx.reshape({n, w.dim(0)});
    matmul(dy2, false, w, true, dx2, false);
  }
  if (dw.defined()) {
    require_shape(op, dw, w.shape());
    matmul(x.reshape({n, w.dim(0)}), true, dy2, false, dw, true);
  }
  if (dbias.defined()) {
    require_shape(op, dbias, {w.dim(1)});
    same_type(op, dy, dbias);
    require_floating(op, dy);
    kernels::column_sum_accumulate(code(dy), dy2.raw(), n, w.dim(1), dbias.raw());
  }
}

void gelu_forward(const Tensor& x, Tensor& y) {
  check_elementwise("gelu_forward", y, x);
  kernels::gelu_forward(code(x), x.raw(), y.raw(), x.numel());
}

void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  check_elementwise("gelu_backward", dx, x, dy);
  kernels::gelu_backward(code(x), dy.raw(), x.raw(), dx.raw(), x.numel());
}

void add_forward(const Tensor& a, const Tensor& b, Tensor& y) {
  check_elementwise("add_forward", y, a, b);
  kernels::add(code(a), a.raw(), b.raw(), y.raw(), a.numel());
}

void accumulate(Tensor& y, const Tensor& x) { add_forward(y, x, y); }

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& rstd) {
  const char* op = "layernorm_forward";
  require_defined(op, x, "x");
  const std::int64_t c = x.dim(-1), n = rows_of(x);
  same_type(op, x, gamma);
  same_type(op, x, beta);
  require_shape(op, gamma, {c});
  require_shape(op, beta, {c});
  same_shape(op, x, y);
  const DataType stat = x.dtype() == DataType::float64 ? DataType::float64 : DataType::float32;
  if (!mean.defined() || !rstd.defined() || mean.dtype() != stat || rstd.dtype() != stat)
    fail(op, "statistics " + mean.describe() + " and " + rstd.describe() + " must be " + std::string(name_of(stat)) +
                 " for " + x.describe());
  require_shape(op, mean, {n});
  require_shape(op, rstd, {n});
  require_device(op, {&x, &gamma, &beta, &y, &mean, &rstd});
  require_floating(op, x);
  kernels::layernorm_forward(code(x), x.raw(), gamma.raw(), beta.raw(), y.raw(), mean.raw(), rstd.raw(), n, c,
                             kLayerNormEps);
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  const char* op = "layernorm_backward";
  require_defined(op, x, "x");
  const std::int64_t c = x.dim(-1), n = rows_of(x);
  // Either part may be left out (undefined): dx, or dgamma with dbeta (a split backward).
  same_shape(op, x, dy);
  if (dx.defined()) same_shape(op, x, dx);
  if (dgamma.defined() || dbeta.defined()) {
    same_shape(op, gamma, dgamma);
    same_shape(op, gamma, dbeta);
  }
  same_type(op, x, gamma);
  require_shape(op, gamma, {c});
  require_shape(op, mean, {n});
  require_shape(op, rstd, {n});
  const DataType stat = x.dtype() == DataType::float64 ? DataType::float64 : DataType::float32;
  if (mean.dtype() != stat || rstd.dtype() != stat)
    fail(op, "statistics " + mean.describe() + " and " + rstd.describe() + " must be " + std::string(name_of(stat)) +
                 " for " + x.describe());
  require_device(op, {&dy, &x, &gamma, &mean, &rstd, &dx, &dgamma, &dbeta});
  require_floating(op, x);
  kernels::layernorm_backward(code(x), dy.raw(), x.raw(), gamma.raw(), mean.raw(), rstd.raw(), dx.raw(),
                              dgamma.raw(), dbeta.raw(), n, c);
}

void softmax_forward(const Tensor& x, Tensor& y) {
  const char* op = "softmax_forward";
  require_defined(op, x, "x");
  same_shape(op, x, y);
  require_device(op, {&x, &y});
  require_floating(op, x);
  kernels::softmax_forward(code(x), x.raw(), y.raw(), rows_of(x), x.dim(-1));
}

void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  const char* op = "softmax_backward";
  require_defined(op, y, "y");
  same_shape(op, y, dy);
  same_shape(op, y, dx);
  require_device(op, {&dy, &y, &dx});
  require_floating(op, y);
  kernels::softmax_backward(code(y), dy.raw(), y.raw(), dx.raw(), rows_of(y), y.dim(-1));
}

namespace {
struct AttentionSizes {
  int B, T, C, H, hs;
};
AttentionSizes attention_sizes(const char* op, const Tensor& qkv, int heads) {
  require_blas_type(op, qkv);
  if (qkv.rank() != 3 || qkv.dim(2) % 3 != 0) fail(op, "qkv " + qkv.describe() + " must be [B, T, 3C]");
  const std::int64_t c = qkv.dim(2) / 3;
  if (heads <= 0 || c % heads != 0)
    fail(op, std::to_string(heads) + " heads do not divide the hidden size " + std::to_string(c) + " of " + qkv.describe());
  return {blas_int(op, qkv.dim(0)), blas_int(op, qkv.dim(1)), blas_int(op, c), heads, blas_int(op, c / heads)};
}
// Score and weighted-sum products, as the CPU's matrix multiplies count them: 2 T^2 hs each.
std::int64_t attention_products_flops(const AttentionSizes& s) {
  return 2LL * s.B * s.H * static_cast<std::int64_t>(s.T) * s.T * s.hs;
}
}  // namespace

void attention_forward(const Tensor& qkv, int heads, bool causal, Tensor& out, Tensor& probs) {
  const char* op = "attention_forward";
  const AttentionSizes s = attention_sizes(op, qkv, heads);
  same_type(op, qkv, out);
  same_type(op, qkv, probs);
  require_shape(op, out, {s.B, s.T, s.C});
  require_shape(op, probs, {s.B, s.H, s.T, s.T});
  require_device(op, {&qkv, &out, &probs});
  kernels::attention_forward(code(qkv), qkv.raw(), out.raw(), probs.raw(), s.B, s.T, s.C, s.H, causal);
  flop_counter().matmul += 2 * attention_products_flops(s);
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int heads, Tensor& dqkv) {
  const char* op = "attention_backward";
  const AttentionSizes s = attention_sizes(op, qkv, heads);
  same_type(op, qkv, dout);
  same_shape(op, qkv, dqkv);
  require_shape(op, dout, {s.B, s.T, s.C});
  require_shape(op, probs, {s.B, s.H, s.T, s.T});
  same_type(op, qkv, probs);
  require_device(op, {&dout, &qkv, &probs, &dqkv});
  Tensor dscores = scratch("attention.dscores", {s.B, s.H, s.T, s.T}, qkv.dtype());
  kernels::attention_backward(code(qkv), dout.raw(), qkv.raw(), probs.raw(), dqkv.raw(), dscores.raw(), s.B, s.T, s.C,
                              s.H);
  flop_counter().matmul += 4 * attention_products_flops(s);
}

namespace {
struct EmbeddingSizes {
  std::int64_t B, T, C, V;
};
EmbeddingSizes embedding_sizes(const char* op, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  require_index_type(op, tokens);
  require_defined(op, wte, "wte");
  if (tokens.rank() != 2) fail(op, "tokens " + tokens.describe() + " must be [B, T]");
  if (wte.rank() != 2) fail(op, "token embedding " + wte.describe() + " must be [V, C]");
  const EmbeddingSizes s{tokens.dim(0), tokens.dim(1), wte.dim(1), wte.dim(0)};
  if (wpe.defined()) {
    same_type(op, wte, wpe);
    if (wpe.rank() != 2 || wpe.dim(1) != s.C || wpe.dim(0) < s.T)
      fail(op, "position embedding " + wpe.describe() + " must be [T_max >= " + std::to_string(s.T) + ", " +
                   std::to_string(s.C) + "]");
  }
  require_device(op, {&tokens, &wte, &wpe});
  require_floating(op, wte);
  const std::int64_t bad = first_invalid(tokens, s.V);
  if (bad >= 0)
    fail(op, "token " + std::to_string(static_cast<std::int64_t>(tokens.at(bad))) + " at position " +
                 std::to_string(bad) + " of " + tokens.describe() + " is outside the vocabulary of " + wte.describe());
  return s;
}
}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& y) {
  const char* op = "embedding_forward";
  require_device(op, {&y});
  const EmbeddingSizes s = embedding_sizes(op, tokens, wte, wpe);
  same_type(op, wte, y);
  require_shape(op, y, {s.B, s.T, s.C});
  kernels::embedding_forward(code(wte), tokens.raw(), code(tokens), wte.raw(), wpe.defined() ? wpe.raw() : nullptr,
                             y.raw(), s.B, s.T, s.C);
}

void embedding_backward(const Tensor& dy, const Tensor& tokens, Tensor& dwte, Tensor& dwpe) {
  const char* op = "embedding_backward";
  require_device(op, {&dy});
  const EmbeddingSizes s = embedding_sizes(op, tokens, dwte, dwpe);
  same_type(op, dwte, dy);
  require_shape(op, dy, {s.B, s.T, s.C});
  // 16-bit gradients add up in float32 and are rounded once.
  Tensor wide;
  if (is_half(dwte.dtype())) wide = scratch(dwte.name() + ".float32", {s.V, s.C}, DataType::float32);
  kernels::embedding_backward(code(dy), dy.raw(), tokens.raw(), code(tokens), dwte.raw(),
                              dwpe.defined() ? dwpe.raw() : nullptr,
                              wide.defined() ? static_cast<float*>(wide.raw()) : nullptr, s.B, s.T, s.C, s.V);
}

namespace {
void check_classification(const char* op, const Tensor& logits, const Tensor& targets, double normalizer) {
  require_defined(op, logits, "logits");
  require_index_type(op, targets);
  if (logits.rank() != 2 || targets.rank() != 1 || targets.dim(0) != logits.dim(0))
    fail(op, "logits " + logits.describe() + " must be [N, V] and targets " + targets.describe() + " [N]");
  if (!(normalizer > 0)) fail(op, "normalizer must be positive");
  require_device(op, {&logits, &targets});
  require_floating(op, logits);
  const std::int64_t bad = first_invalid(targets, logits.dim(1));
  if (bad >= 0)
    fail(op, "target " + std::to_string(static_cast<std::int64_t>(targets.at(bad))) + " at row " + std::to_string(bad) +
                 " is outside the " + std::to_string(logits.dim(1)) + " classes of " + logits.describe());
}

double cross_entropy(const char* op, const Tensor& logits, const Tensor& targets, double normalizer, Tensor* dlogits) {
  Tensor sums = scratch(std::string(op) + ".row_losses", {logits.dim(0) + 1}, DataType::float64);
  return kernels::cross_entropy(code(logits), logits.raw(), targets.raw(), code(targets), logits.dim(0), logits.dim(1),
                                normalizer, dlogits ? dlogits->raw() : nullptr, static_cast<double*>(sums.raw()));
}
}  // namespace

double cross_entropy_forward(const Tensor& logits, const Tensor& targets, double normalizer) {
  const char* op = "cross_entropy_forward";
  check_classification(op, logits, targets, normalizer);
  return cross_entropy(op, logits, targets, normalizer, nullptr);
}

double cross_entropy_backward(const Tensor& logits, const Tensor& targets, double normalizer, Tensor& dlogits) {
  const char* op = "cross_entropy_backward";
  require_device(op, {&dlogits});
  check_classification(op, logits, targets, normalizer);
  same_shape(op, logits, dlogits);
  return cross_entropy(op, logits, targets, normalizer, &dlogits);
}

namespace {
void check_vocabulary_ids(const char* op, const Tensor& ids, std::int64_t vocabulary, const char* what) {
  require_index_type(op, ids);
  if (vocabulary <= 0) fail(op, "the vocabulary must be positive, not " + std::to_string(vocabulary));
  const std::int64_t bad = first_invalid(ids, vocabulary);
  if (bad >= 0)
    fail(op, std::string(what) + " " + std::to_string(static_cast<std::int64_t>(ids.at(bad))) + " at " +
                 std::to_string(bad) + " of " + ids.describe() + " is outside the vocabulary of " +
                 std::to_string(vocabulary));
}



void check_logits(const char* op, const Tensor& logits, const Tensor* targets) {
  require_defined(op, logits, "logits");
  if (logits.rank() != 2 || (targets && (targets->rank() != 1 || targets->dim(0) != logits.dim(0))))
    fail(op, "logits " + logits.describe() + " must be [N, V_shard]" +
                 (targets ? " and targets " + targets->describe() + " [N]" : std::string()));
  require_floating(op, logits);
}
}  // namespace

void embedding_shard_forward(const Tensor& tokens, const Tensor& wte_shard, std::int64_t first_token,
                             std::int64_t vocabulary, Tensor& y) {
  const char* op = "embedding_shard_forward";
  require_defined(op, wte_shard, "wte_shard");
  require_device(op, {&tokens, &wte_shard, &y});
  if (tokens.rank() != 2 || wte_shard.rank() != 2)
    fail(op, "tokens " + tokens.describe() + " must be [B, T] and " + wte_shard.describe() + " [V_shard, C]");
  check_vocabulary_ids(op, tokens, vocabulary, "token");
  require_vocabulary_shard(op, wte_shard, first_token, vocabulary, 0);
  same_type(op, wte_shard, y);
  require_floating(op, wte_shard);
  require_shape(op, y, {tokens.dim(0), tokens.dim(1), wte_shard.dim(1)});
  kernels::embedding_shard_forward(code(wte_shard), tokens.raw(), code(tokens), wte_shard.raw(), y.raw(), tokens.numel(),
                                   wte_shard.dim(1), first_token, wte_shard.dim(0));
}

void embedding_shard_backward(const Tensor& dy, const Tensor& tokens, std::int64_t first_token, Tensor& dwte_shard) {
  const char* op = "embedding_shard_backward";
  require_defined(op, dwte_shard, "dwte_shard");
  require_index_type(op, tokens);
  require_device(op, {&dy, &tokens, &dwte_shard});
  if (tokens.rank() != 2 || dwte_shard.rank() != 2)
    fail(op, "tokens " + tokens.describe() + " must be [B, T] and " + dwte_shard.describe() + " [V_shard, C]");
  same_type(op, dwte_shard, dy);
  require_floating(op, dy);
  const std::int64_t v = dwte_shard.dim(0), c = dwte_shard.dim(1);
  require_shape(op, dy, {tokens.dim(0), tokens.dim(1), c});
  Tensor wide;
  if (is_half(dwte_shard.dtype())) wide = scratch(dwte_shard.name() + ".float32", {v, c}, DataType::float32);
  kernels::embedding_shard_backward(code(dy), dy.raw(), tokens.raw(), code(tokens), dwte_shard.raw(),
                                    wide.defined() ? static_cast<float*>(wide.raw()) : nullptr, tokens.numel(), c,
                                    first_token, v);
}

void cross_entropy_shard_max(const Tensor& logits_shard, Tensor& row_max) {
  const char* op = "cross_entropy_shard_max";
  check_logits(op, logits_shard, nullptr);
  require_row_statistic(op, logits_shard, row_max);
  require_device(op, {&logits_shard, &row_max});
  kernels::cross_entropy_shard_max(code(logits_shard), logits_shard.raw(), logits_shard.dim(0), logits_shard.dim(1),
                                   row_max.raw());
}

void cross_entropy_shard_sums(const Tensor& logits_shard, const Tensor& targets, std::int64_t first_class,
                              std::int64_t vocabulary, const Tensor& row_max, Tensor& sum_exp, Tensor& target_logit) {
  const char* op = "cross_entropy_shard_sums";
  check_logits(op, logits_shard, &targets);
  require_device(op, {&logits_shard, &targets, &row_max, &sum_exp, &target_logit});
  check_vocabulary_ids(op, targets, vocabulary, "target");
  require_vocabulary_shard(op, logits_shard, first_class, vocabulary, 1);
  require_row_statistic(op, logits_shard, row_max);
  require_row_statistic(op, logits_shard, sum_exp);
  require_row_statistic(op, logits_shard, target_logit);
  kernels::cross_entropy_shard_sums(code(logits_shard), logits_shard.raw(), targets.raw(), code(targets),
                                    logits_shard.dim(0), logits_shard.dim(1), first_class, row_max.raw(),
                                    sum_exp.raw(), target_logit.raw());
}

void cross_entropy_shard_backward(const Tensor& logits_shard, const Tensor& targets, std::int64_t first_class,
                                  const Tensor& row_max, const Tensor& sum_exp, double normalizer,
                                  Tensor& dlogits_shard) {
  const char* op = "cross_entropy_shard_backward";
  check_logits(op, logits_shard, &targets);
  require_index_type(op, targets);
  if (!(normalizer > 0)) fail(op, "normalizer must be positive");
  require_device(op, {&logits_shard, &targets, &row_max, &sum_exp, &dlogits_shard});
  same_shape(op, logits_shard, dlogits_shard);
  same_type(op, logits_shard, dlogits_shard);
  require_row_statistic(op, logits_shard, row_max);
  require_row_statistic(op, logits_shard, sum_exp);
  kernels::cross_entropy_shard_backward(code(logits_shard), logits_shard.raw(), targets.raw(), code(targets),
                                        logits_shard.dim(0), logits_shard.dim(1), first_class, row_max.raw(),
                                        sum_exp.raw(), normalizer, dlogits_shard.raw());
}

double mse_forward(const Tensor& prediction, const Tensor& target, double normalizer) {
  const char* op = "mse_forward";
  require_defined(op, prediction, "prediction");
  same_shape(op, prediction, target);
  if (!(normalizer > 0)) fail(op, "normalizer must be positive");
  require_device(op, {&prediction, &target});
  require_floating(op, prediction);
  Tensor sums = scratch("mse.block_sums", {kernels::kMseScratch}, DataType::float64);
  return kernels::mse_forward(code(prediction), prediction.raw(), target.raw(), prediction.numel(), normalizer,
                              static_cast<double*>(sums.raw()));
}

void mse_backward(const Tensor& prediction, const Tensor& target, double normalizer, Tensor& dprediction) {
  const char* op = "mse_backward";
  if (!(normalizer > 0)) fail(op, "normalizer must be positive");
  check_elementwise(op, dprediction, prediction, target);
  kernels::mse_backward(code(prediction), prediction.raw(), target.raw(), dprediction.raw(), prediction.numel(),
                        2.0 / normalizer);
}

namespace {
void dropout_apply(const char* op, const Tensor& in, double p, DropoutKey key, Tensor& out) {
  require_defined(op, in, "input");
  same_shape(op, in, out);
  if (!(p >= 0 && p < 1)) fail(op, "dropout probability " + std::to_string(p) + " must be in [0, 1)");
  require_device(op, {&in, &out});
  require_floating(op, in);
  kernels::dropout(code(in), in.raw(), out.raw(), in.numel(), p, key.seed, key.stream, key.first_element);
}
}  // namespace

void dropout_forward(const Tensor& x, double p, DropoutKey key, Tensor& y) { dropout_apply("dropout_forward", x, p, key, y); }
void dropout_backward(const Tensor& dy, double p, DropoutKey key, Tensor& dx) {
  dropout_apply("dropout_backward", dy, p, key, dx);
}

namespace {
void check_update(const char* op, const Tensor& value, const Tensor& grad, std::initializer_list<const Tensor*> state,
                  DataType state_dtype) {
  require_defined(op, value, "parameter");
  require_defined(op, grad, "gradient");
  if (value.dtype() != grad.dtype() || value.numel() != grad.numel())
    fail(op, "value " + value.describe() + " and gradient " + grad.describe() + " do not match");
  if (!is_floating(value.dtype())) fail(op, "parameter " + value.describe() + " is not floating-point");
  if (state_dtype != DataType::float32 && state_dtype != DataType::float64)
    fail(op, "optimizer state must be float32 or float64, not " + std::string(name_of(state_dtype)));
  for (const Tensor* s : state) {
    require_defined(op, *s, "state");
    if (s->numel() != value.numel() || s->dtype() != state_dtype)
      fail(op, "state " + s->describe() + " does not match " + value.describe());
  }
  require_device(op, {&value, &grad});
  require_device(op, state);
}
}  // namespace

void sgd_update(Tensor& value, const Tensor& grad, Tensor* momentum_buffer, DataType state_dtype,
                double learning_rate, double momentum, double weight_decay) {
  const char* op = "sgd";
  if (momentum_buffer)
    check_update(op, value, grad, {momentum_buffer}, state_dtype);
  else
    check_update(op, value, grad, {}, state_dtype);
  kernels::sgd_update(code(value), code(state_dtype), value.raw(), grad.raw(),
                      momentum_buffer ? momentum_buffer->raw() : nullptr, value.numel(), learning_rate, momentum,
                      weight_decay);
}

void adamw_update(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, double learning_rate, double beta1,
                  double beta2, double epsilon, double weight_decay, std::int64_t step) {
  const char* op = "adamw";
  require_defined(op, m, "state");
  check_update(op, value, grad, {&m, &v}, m.dtype());
  if (step < 1) fail(op, "steps count from 1");
  const double correction1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double correction2 = 1 - std::pow(beta2, static_cast<double>(step));
  kernels::adamw_update(code(value), code(m), value.raw(), grad.raw(), m.raw(), v.raw(), value.numel(), learning_rate,
                        beta1, beta2, epsilon, weight_decay, correction1, correction2);
}

namespace {
const std::int64_t* indices(const Tensor& t) { return static_cast<const std::int64_t*>(t.raw()); }
}  // namespace

void gather_rows_forward(const Tensor& x, const RowMap& map, Tensor& y) {
  const char* op = "gather_rows_forward";
  const RowMapSizes s = check_row_map(op, map, x, y);
  require_device(op, {&x, &y});
  require_floating(op, x);
  kernels::gather_rows(code(x), x.raw(), indices(map.row_token), y.raw(), s.A, s.C);
}

void gather_rows_backward(const Tensor& dy, const RowMap& map, Tensor& dx) {
  const char* op = "gather_rows_backward";
  const RowMapSizes s = check_row_map(op, map, dx, dy);
  require_device(op, {&dy, &dx});
  require_floating(op, dy);
  kernels::sum_token_rows(code(dy), dy.raw(), nullptr, indices(map.token_offsets), indices(map.token_rows), dx.raw(),
                          s.N, s.C);
}

void combine_rows_forward(const Tensor& rows, const Tensor& gates, const RowMap& map, Tensor& y) {
  const char* op = "combine_rows_forward";
  const RowMapSizes s = check_row_map(op, map, y, rows);
  check_gates(op, rows, gates, s.A);
  require_device(op, {&rows, &gates, &y});
  require_floating(op, rows);
  kernels::sum_token_rows(code(rows), rows.raw(), gates.raw(), indices(map.token_offsets), indices(map.token_rows),
                          y.raw(), s.N, s.C);
}

void combine_rows_backward(const Tensor& dy, const Tensor& rows, const Tensor& gates, const RowMap& map,
                           Tensor& drows, Tensor& dgates) {
  const char* op = "combine_rows_backward";
  const RowMapSizes s = check_row_map(op, map, dy, rows);
  check_gates(op, rows, gates, s.A);
  same_shape(op, rows, drows);
  check_gates(op, rows, dgates, s.A);
  require_device(op, {&dy, &rows, &gates, &drows, &dgates});
  require_floating(op, rows);
  kernels::combine_rows_backward(code(rows), dy.raw(), rows.raw(), gates.raw(), indices(map.row_token), drows.raw(),
                                 dgates.raw(), s.A, s.C);
}

}  // namespace parity::ops::cuda
