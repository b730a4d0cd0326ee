// Cross-entropy of logits against class targets (ops.hpp: cross_entropy_forward,
// cross_entropy_backward) and its vocabulary-parallel form over shards of the classes
// (cross_entropy_shard_max, cross_entropy_shard_sums, cross_entropy_shard_backward).
#include "reference/ops/unit.hpp"

namespace parity::ops::device {
// Sum over rows of -log softmax(logits_n)[target_n], divided by normalizer, reduced in float64
// on the device in a fixed order and returned (waits). When dlogits is not null it is set to
// (softmax - onehot) / normalizer. scratch: rows + 1 doubles.
double cross_entropy(int dtype, const void* logits, const void* targets, int index_dtype, std::int64_t rows,
                     std::int64_t classes, double normalizer, void* dlogits, double* scratch);
// Per row of logits [rows, classes] (statistics in the accumulation type: double for float64,
// else float): the maximum; the sum of exp(l - max) and the logit of target - first (0 outside
// the shard); the gradient (exp(l - max) / sum - [j = target - first]) / normalizer.
void cross_entropy_shard_max(int dtype, const void* logits, std::int64_t rows, std::int64_t classes, void* row_max);
void cross_entropy_shard_sums(int dtype, const void* logits, const void* targets, int index_dtype, std::int64_t rows,
                              std::int64_t classes, std::int64_t first, const void* row_max, void* sum_exp,
                              void* target_logit);
void cross_entropy_shard_backward(int dtype, const void* logits, const void* targets, int index_dtype,
                                  std::int64_t rows, std::int64_t classes, std::int64_t first, const void* row_max,
                                  const void* sum_exp, double normalizer, void* dlogits);
}  // namespace parity::ops::device

#ifndef __CUDACC__

#include <string>
#include <vector>

#include "reference/core/error.hpp"

namespace parity::ops {

namespace {
void check_classification(const char* op, const Tensor& logits, const Tensor& targets, double normalizer) {
  require_defined(op, logits, "logits");
  require_index_type(op, targets);
  if (logits.rank() != 2 || targets.rank() != 1 || targets.dim(0) != logits.dim(0))
    fail(op, "logits " + logits.describe() + " must be [N, V] and targets " + targets.describe() + " [N]");
  if (!(normalizer > 0)) fail(op, "normalizer must be positive");
  require_floating(op, logits);
  const IndexOutside bad = first_index_outside(targets, logits.dim(1));
  if (bad.position >= 0)
    fail(op, "target " + std::to_string(bad.value) + " at row " + std::to_string(bad.position) + " is outside the " +
                 std::to_string(logits.dim(1)) + " classes of " + logits.describe());
}

// The loss (and dlogits when not null) on the device: per-row losses in float64 scratch, summed
// there in a fixed order and copied back (waits).
double cross_entropy_on_device(const char* op, const Tensor& logits, const Tensor& targets, double normalizer,
                               Tensor* dlogits) {
  Tensor sums = device_scratch(std::string(op) + ".row_losses", {logits.dim(0) + 1}, DataType::float64);
  return device::cross_entropy(code(logits), logits.raw(), targets.raw(), code(targets), logits.dim(0), logits.dim(1),
                               normalizer, dlogits ? dlogits->raw() : nullptr, static_cast<double*>(sums.raw()));
}

// Logits of a shard of the classes, [N, V_shard], with targets [N] when given and per-row
// statistics [N] (float64 for float64 logits, else float32); returns N and V_shard.
struct ShardSizes {
  std::int64_t N, V;
};
ShardSizes check_shard_logits(const char* op, const Tensor& logits, const Tensor* targets,
                              std::initializer_list<const Tensor*> statistics) {
  require_defined(op, logits, "logits");
  if (logits.rank() != 2 || (targets && (targets->rank() != 1 || targets->dim(0) != logits.dim(0))))
    fail(op, "logits " + logits.describe() + " must be [N, V_shard]" +
                 (targets ? " and targets " + targets->describe() + " [N]" : std::string()));
  require_floating(op, logits);
  for (const Tensor* statistic : statistics) require_row_statistic(op, logits, *statistic);
  if (targets) require_index_type(op, *targets);
  return {logits.dim(0), logits.dim(1)};
}
// Turns g = exp(x - max) over a row of v into the cross-entropy's gradient: times 1 / sum, less 1
// at the target (when it is in the row), times 1 / normalizer, each rounded in that order.
template <typename C> void softmax_gradient(C* g, std::int64_t v, C sum, std::int64_t target, C inv) {
  // The target's entry, checked: one outside the row is not this row's to touch (a shard's
  // neighbour owns it), and reaching for it would write past the row.
  const auto entry = [&]() -> C& {
    if (target < 0 || target >= v)
      throw Error("cross-entropy: target " + std::to_string(target) + " is outside a row of " + std::to_string(v));
    return g[target];
  };
  const C reciprocal = C(1) / sum;
  const bool here = target >= 0 && target < v;
  const C at_target = here ? entry() : C(0);
  simd::scale_twice(g, static_cast<std::size_t>(v), reciprocal, inv);
  if (here) entry() = (at_target * reciprocal - C(1)) * inv;
}
// Row r of [N, V] logits as the arithmetic type: the row itself for float32 and float64, else
// widened into `buffer` (V elements).
template <typename T> const Acc<T>* logits_row(const T* logits, std::int64_t r, std::int64_t v, std::vector<Acc<T>>& buffer) {
  if constexpr (std::is_same_v<T, Acc<T>>) {
    return logits + r * v;
  } else {
    buffer.resize(static_cast<std::size_t>(v));
    widen(logits + r * v, buffer.data(), v);
    return buffer.data();
  }
}
}  // namespace

double cross_entropy_forward(const Tensor& logits, const Tensor& targets, double normalizer) {
  const char* op = "cross_entropy_forward";
  require_same_space(op, {&logits, &targets});
  check_classification(op, logits, targets, normalizer);
  if constexpr (kCudaBuilt) {
    if (on_device(logits)) return cross_entropy_on_device(op, logits, targets, normalizer, nullptr);
  }
  return visit_floating(op, logits, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const std::int64_t n = logits.dim(0), v = logits.dim(1);
    const auto width = static_cast<std::size_t>(v);
    std::vector<C> buffer;
    double total = 0;
    for (std::int64_t r = 0; r < n; ++r) {
      // softmax_row's max and sum (vectorised, blocked order): cross_entropy_backward's loss bit for
      // bit. The next row (float32 and float64, read in place) comes into cache meanwhile.
      const C* row = logits_row(logits.data<T>(), r, v, buffer);
      const C m = simd::row_max(row, width);
      const C sum = simd::exp_sum(row, width, m, nullptr, std::is_same_v<T, C> && r + 1 < n ? row + v : nullptr);
      total += static_cast<double>(std::log(sum) + m - row[index_at(targets, r)]);
    }
    return total / normalizer;
  });
}

double cross_entropy_backward(const Tensor& logits, const Tensor& targets, double normalizer, Tensor& dlogits) {
  const char* op = "cross_entropy_backward";
  require_same_space(op, {&logits, &targets, &dlogits});
  check_classification(op, logits, targets, normalizer);
  same_shape(op, logits, dlogits);
  if constexpr (kCudaBuilt) {
    if (on_device(logits)) return cross_entropy_on_device(op, logits, targets, normalizer, &dlogits);
  }
  return visit_floating(op, logits, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const std::int64_t n = logits.dim(0), v = logits.dim(1);
    const C inv = static_cast<C>(1.0 / normalizer);
    const auto width = static_cast<std::size_t>(v);
    const T* in = logits.data<T>();
    T* out = dlogits.data<T>();
    std::vector<C> buffer(std::is_same_v<T, C> ? 0 : static_cast<std::size_t>(v));
    double total = 0;
    for (std::int64_t r = 0; r < n; ++r) {
      const std::int64_t target = index_at(targets, r);
      // From the input into the output for float32 and float64, else through a widened row.
      C* row = std::is_same_v<T, C> ? reinterpret_cast<C*>(out + r * v) : buffer.data();
      const C* from = row;
      if constexpr (std::is_same_v<T, C>) from = in + r * v;
      else widen(in + r * v, row, v);
      // The same sums in the same order as cross_entropy_forward: the same loss, bit for bit.
      const C target_logit = from[target];
      const C m = simd::row_max(from, width);
      const C sum = simd::exp_sum(from, width, m, row);
      total += static_cast<double>(m + std::log(sum) - target_logit);
      softmax_gradient(row, v, sum, target, inv);
      if constexpr (!std::is_same_v<T, C>) narrow(row, out + r * v, v);
    }
    return total / normalizer;
  });
}

void cross_entropy_shard_max(const Tensor& logits_shard, Tensor& row_max) {
  const char* op = "cross_entropy_shard_max";
  require_same_space(op, {&logits_shard, &row_max});
  const auto [n, v] = check_shard_logits(op, logits_shard, nullptr, {&row_max});
  if constexpr (kCudaBuilt) {
    if (on_device(logits_shard))
      return device::cross_entropy_shard_max(code(logits_shard), logits_shard.raw(), n, v, row_max.raw());
  }
  visit_floating(op, logits_shard, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const T* in = logits_shard.data<T>();
    C* out = row_max.data<C>();
    std::vector<C> buffer;
    for (std::int64_t r = 0; r < n; ++r) out[r] = simd::row_max(logits_row(in, r, v, buffer), static_cast<std::size_t>(v));
  });
}

void cross_entropy_shard_sums(const Tensor& logits_shard, const Tensor& targets, std::int64_t first_class,
                              std::int64_t vocabulary, const Tensor& row_max, Tensor& sum_exp, Tensor& target_logit) {
  const char* op = "cross_entropy_shard_sums";
  require_same_space(op, {&logits_shard, &targets, &row_max, &sum_exp, &target_logit});
  const auto [n, v] = check_shard_logits(op, logits_shard, &targets, {&row_max, &sum_exp, &target_logit});
  if (vocabulary <= 0) fail(op, "the vocabulary must be positive, not " + std::to_string(vocabulary));
  const IndexOutside bad = first_index_outside(targets, vocabulary);
  if (bad.position >= 0)
    fail(op, "target " + std::to_string(bad.value) + " at " + std::to_string(bad.position) + " of " +
                 targets.describe() + " is outside the vocabulary of " + std::to_string(vocabulary));
  require_vocabulary_shard(op, logits_shard, first_class, vocabulary, 1);
  if constexpr (kCudaBuilt) {
    if (on_device(logits_shard))
      return device::cross_entropy_shard_sums(code(logits_shard), logits_shard.raw(), targets.raw(), code(targets), n,
                                              v, first_class, row_max.raw(), sum_exp.raw(), target_logit.raw());
  }
  visit_floating(op, logits_shard, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const T* in = logits_shard.data<T>();
    const C* m = row_max.data<C>();
    C* s = sum_exp.data<C>();
    C* z = target_logit.data<C>();
    std::vector<C> buffer;
    for (std::int64_t r = 0; r < n; ++r) {
      const C* row = logits_row(in, r, v, buffer);
      s[r] = simd::exp_sum(row, static_cast<std::size_t>(v), m[r], nullptr);
      const std::int64_t target = index_at(targets, r) - first_class;
      z[r] = target >= 0 && target < v ? row[target] : C(0);
    }
  });
}

void cross_entropy_shard_backward(const Tensor& logits_shard, const Tensor& targets, std::int64_t first_class,
                                  const Tensor& row_max, const Tensor& sum_exp, double normalizer,
                                  Tensor& dlogits_shard) {
  const char* op = "cross_entropy_shard_backward";
  require_same_space(op, {&logits_shard, &targets, &row_max, &sum_exp, &dlogits_shard});
  const auto [n, v] = check_shard_logits(op, logits_shard, &targets, {&row_max, &sum_exp});
  if (!(normalizer > 0)) fail(op, "normalizer must be positive");
  same_shape(op, logits_shard, dlogits_shard);
  if constexpr (kCudaBuilt) {
    if (on_device(logits_shard))
      return device::cross_entropy_shard_backward(code(logits_shard), logits_shard.raw(), targets.raw(), code(targets),
                                                  n, v, first_class, row_max.raw(), sum_exp.raw(), normalizer,
                                                  dlogits_shard.raw());
  }
  visit_floating(op, logits_shard, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const C inv = static_cast<C>(1.0 / normalizer);
    const T* in = logits_shard.data<T>();
    const C* m = row_max.data<C>();
    const C* s = sum_exp.data<C>();
    T* out = dlogits_shard.data<T>();
    const auto width = static_cast<std::size_t>(v);
    std::vector<C> buffer, gradient(std::is_same_v<T, C> ? 0 : width);
    for (std::int64_t r = 0; r < n; ++r) {
      // g = exp(x - max) / sum, less 1 at the target, times 1 / normalizer (vectorised); in
      // place in the output for float32 and float64.
      const C* row = logits_row(in, r, v, buffer);
      C* g = std::is_same_v<T, C> ? reinterpret_cast<C*>(out + r * v) : gradient.data();
      simd::exp_sum(row, width, m[r], g);
      softmax_gradient(g, v, s[r], index_at(targets, r) - first_class, inv);
      if constexpr (!std::is_same_v<T, C>) narrow(g, out + r * v, v);
    }
  });
}

}  // namespace parity::ops

#else  // the device part

namespace parity::ops::device {
namespace {

template <typename T, typename I>
__global__ void cross_entropy_kernel(const T* logits, const I* targets, int64_t rows, int64_t classes,
                                     Acc<T> inv_normalizer, T* dlogits, double* row_loss) {
  using C = Acc<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = logits + r * classes;
    const C m = block_row_max(x, classes);
    const C s = block_row_exp_sum(x, classes, m);
    const int64_t target = static_cast<int64_t>(targets[r]);
    if (threadIdx.x == 0) row_loss[r] = static_cast<double>(dlog(s) + m - load(x[target]));
    if (dlogits != nullptr) {
      const C inv = C(1) / s;
      for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
        C g = dexp(load(x[j]) - m) * inv;
        if (j == target) g -= C(1);
        store(dlogits[r * classes + j], g * inv_normalizer);
      }
    }
  }
}

template <typename T> __global__ void shard_max_kernel(const T* logits, int64_t rows, int64_t classes, Acc<T>* row_max) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const Acc<T> m = block_row_max(logits + r * classes, classes);
    if (threadIdx.x == 0) row_max[r] = m;
  }
}

template <typename T, typename I>
__global__ void shard_sums_kernel(const T* logits, const I* targets, int64_t rows, int64_t classes, int64_t first,
                                  const Acc<T>* row_max, Acc<T>* sum_exp, Acc<T>* target_logit) {
  using C = Acc<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = logits + r * classes;
    const C s = block_row_exp_sum(x, classes, row_max[r]);
    if (threadIdx.x == 0) {
      const int64_t target = static_cast<int64_t>(targets[r]) - first;
      sum_exp[r] = s;
      target_logit[r] = target >= 0 && target < classes ? load(x[target]) : C(0);
    }
  }
}

template <typename T, typename I>
__global__ void shard_backward_kernel(const T* logits, const I* targets, int64_t rows, int64_t classes, int64_t first,
                                      const Acc<T>* row_max, const Acc<T>* sum_exp, Acc<T> inv_normalizer, T* dlogits) {
  using C = Acc<T>;
  PARITY_GRID_STRIDE(e, rows * classes) {
    const int64_t r = e / classes, j = e % classes;
    C g = dexp(load(logits[e]) - row_max[r]) / sum_exp[r];
    if (j == static_cast<int64_t>(targets[r]) - first) g -= C(1);
    store(dlogits[e], g * inv_normalizer);
  }
}

}  // namespace

double cross_entropy(int dtype, const void* logits, const void* targets, int index_dtype, int64_t rows,
                     int64_t classes, double normalizer, void* dlogits, double* scratch) {
  visit_floating(dtype, "cross_entropy", [&](auto tag) {
    using F = decltype(tag);
    visit_index(index_dtype, "cross_entropy", [&](auto index_tag) {
      using I = decltype(index_tag);
      cross_entropy_kernel<F, I><<<row_blocks(rows), kRowThreads, 0, stream()>>>(
          static_cast<const F*>(logits), static_cast<const I*>(targets), rows, classes,
          static_cast<Acc<F>>(1.0 / normalizer), static_cast<F*>(dlogits), scratch);
    });
  });
  check_launch("cross_entropy_kernel");
  sum_kernel<double><<<1, kSumThreads, 0, stream()>>>(scratch, rows, scratch + rows);
  check_launch("sum_kernel");
  return read_double(scratch + rows) / normalizer;
}

void cross_entropy_shard_max(int dtype, const void* logits, int64_t rows, int64_t classes, void* row_max) {
  visit_floating(dtype, "cross_entropy_shard_max", [&](auto tag) {
    using F = decltype(tag);
    shard_max_kernel<F><<<row_blocks(rows), kRowThreads, 0, stream()>>>(static_cast<const F*>(logits), rows, classes,
                                                                         static_cast<Acc<F>*>(row_max));
  });
  check_launch("shard_max_kernel");
}

void cross_entropy_shard_sums(int dtype, const void* logits, const void* targets, int index_dtype, int64_t rows,
                              int64_t classes, int64_t first, const void* row_max, void* sum_exp, void* target_logit) {
  visit_floating(dtype, "cross_entropy_shard_sums", [&](auto tag) {
    using F = decltype(tag);
    visit_index(index_dtype, "cross_entropy_shard_sums", [&](auto index_tag) {
      using I = decltype(index_tag);
      shard_sums_kernel<F, I><<<row_blocks(rows), kRowThreads, 0, stream()>>>(
          static_cast<const F*>(logits), static_cast<const I*>(targets), rows, classes, first,
          static_cast<const Acc<F>*>(row_max), static_cast<Acc<F>*>(sum_exp), static_cast<Acc<F>*>(target_logit));
    });
  });
  check_launch("shard_sums_kernel");
}

void cross_entropy_shard_backward(int dtype, const void* logits, const void* targets, int index_dtype, int64_t rows,
                                  int64_t classes, int64_t first, const void* row_max, const void* sum_exp,
                                  double normalizer, void* dlogits) {
  visit_floating(dtype, "cross_entropy_shard_backward", [&](auto tag) {
    using F = decltype(tag);
    visit_index(index_dtype, "cross_entropy_shard_backward", [&](auto index_tag) {
      using I = decltype(index_tag);
      shard_backward_kernel<F, I><<<blocks_for(rows * classes), kThreads, 0, stream()>>>(
          static_cast<const F*>(logits), static_cast<const I*>(targets), rows, classes, first,
          static_cast<const Acc<F>*>(row_max), static_cast<const Acc<F>*>(sum_exp),
          static_cast<Acc<F>>(1.0 / normalizer), static_cast<F*>(dlogits));
    });
  });
  check_launch("shard_backward_kernel");
}

}  // namespace parity::ops::device

#endif
