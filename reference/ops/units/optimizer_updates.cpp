// The optimizers' element updates (ops.hpp: sgd_update, adamw_update; model::Sgd and
// model::AdamW call them on whole parameters, ZeRO on a rank's shard): arithmetic in the state
// type (float32 or float64) whatever the value's storage, elements read and written through
// float64 as parity::to_double and from_double do.
#include "reference/ops/unit.hpp"

namespace parity::ops::device {
// SGD: d = g + wd p; with momentum (buffer not null) d = buffer = mu buffer + d; p -= lr d.
// Arithmetic in the state type (float32 or float64).
void sgd_update(int value_dtype, int state_dtype, void* value, const void* grad, void* buffer, std::int64_t count,
                double learning_rate, double momentum, double weight_decay);
// AdamW with the bias corrections 1 - beta^t given.
void adamw_update(int value_dtype, int state_dtype, void* value, const void* grad, void* m, void* v,
                  std::int64_t count, double learning_rate, double beta1, double beta2, double epsilon,
                  double weight_decay, double correction1, double correction2);
}  // namespace parity::ops::device

#ifndef __CUDACC__

namespace parity::ops {

namespace {
// value and grad alike; every state tensor of value's size in the state type (float32/float64).
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
}

// Calls f(V{}, S{}) for the value's storage type V and the state type S (both checked).
template <typename F> void visit_update(const char* op, const Tensor& value, DataType state_dtype, F&& f) {
  visit_floating(op, value, [&](auto value_tag) {
    if (state_dtype == DataType::float64)
      f(value_tag, double{});
    else
      f(value_tag, float{});
  });
}
}  // namespace

void sgd_update(Tensor& value, const Tensor& grad, Tensor* momentum_buffer, DataType state_dtype,
                double learning_rate, double momentum, double weight_decay) {
  const char* op = "sgd";
  const Tensor none;
  const Tensor& buffer = momentum_buffer ? *momentum_buffer : none;
  if (momentum_buffer)
    check_update(op, value, grad, {momentum_buffer}, state_dtype);
  else
    check_update(op, value, grad, {}, state_dtype);
  require_same_space(op, {&value, &grad, &buffer});
  if constexpr (kCudaBuilt) {
    if (on_device(value))
      return device::sgd_update(code(value), code(state_dtype), value.raw(), grad.raw(),
                                momentum_buffer ? momentum_buffer->raw() : nullptr, value.numel(), learning_rate,
                                momentum, weight_decay);
  }
  visit_update(op, value, state_dtype, [&](auto value_tag, auto state_tag) {
    using V = decltype(value_tag);
    using S = decltype(state_tag);
    V* p = value.data<V>();
    const V* g = grad.data<V>();
    S* buf = momentum_buffer ? momentum_buffer->data<S>() : nullptr;
    const S lr = static_cast<S>(learning_rate), mu = static_cast<S>(momentum), wd = static_cast<S>(weight_decay);
    for (std::int64_t i = 0; i < value.numel(); ++i) {
      const S pi = static_cast<S>(to_double(p[i]));
      S d = static_cast<S>(to_double(g[i])) + wd * pi;
      if (buf) d = buf[i] = mu * buf[i] + d;
      p[i] = from_double<V>(pi - lr * d);
    }
  });
}

void adamw_update(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, double learning_rate, double beta1,
                  double beta2, double epsilon, double weight_decay, std::int64_t step) {
  const char* op = "adamw";
  require_defined(op, m, "state");
  check_update(op, value, grad, {&m, &v}, m.dtype());
  if (step < 1) fail(op, "steps count from 1");
  require_same_space(op, {&value, &grad, &m, &v});
  const double correction1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double correction2 = 1 - std::pow(beta2, static_cast<double>(step));
  if constexpr (kCudaBuilt) {
    if (on_device(value))
      return device::adamw_update(code(value), code(m), value.raw(), grad.raw(), m.raw(), v.raw(), value.numel(),
                                  learning_rate, beta1, beta2, epsilon, weight_decay, correction1, correction2);
  }
  visit_update(op, value, m.dtype(), [&](auto value_tag, auto state_tag) {
    using V = decltype(value_tag);
    using S = decltype(state_tag);
    V* p = value.data<V>();
    const V* g = grad.data<V>();
    S* pm = m.data<S>();
    S* pv = v.data<S>();
    const S lr = static_cast<S>(learning_rate), b1 = static_cast<S>(beta1), b2 = static_cast<S>(beta2),
            eps = static_cast<S>(epsilon), wd = static_cast<S>(weight_decay);
    // 1 - beta is formed in float64 and rounded once: in the state type it would cancel
    // (1 - 0.999f errs by 1.3e-5 relative), an error the step would carry into v.
    const S one_minus_b1 = static_cast<S>(1 - beta1), one_minus_b2 = static_cast<S>(1 - beta2);
    const S c1 = static_cast<S>(correction1), c2 = static_cast<S>(correction2);
    if constexpr (std::is_same_v<V, S>) {  // float32 or float64 values and state: vectorised
      return simd::adamw(p, g, pm, pv, static_cast<std::size_t>(value.numel()),
                         simd::AdamW<S>{lr, b1, b2, eps, wd, one_minus_b1, one_minus_b2, c1, c2});
    }
    for (std::int64_t i = 0; i < value.numel(); ++i) {
      S pi = static_cast<S>(to_double(p[i]));
      const S gi = static_cast<S>(to_double(g[i]));
      pi -= lr * wd * pi;
      pm[i] = b1 * pm[i] + one_minus_b1 * gi;
      pv[i] = b2 * pv[i] + one_minus_b2 * gi * gi;
      pi -= lr * (pm[i] / c1) / (std::sqrt(pv[i] / c2) + eps);
      p[i] = from_double<V>(pi);
    }
  });
}

}  // namespace parity::ops

#else  // the device part

#include <type_traits>

namespace parity::ops::device {
namespace {

// A parameter or gradient element as the state type S, through double as the CPU does.
template <typename S, typename V> __device__ inline S to_state(V v) {
  return static_cast<S>(static_cast<double>(load(v)));
}
// An updated value stored in V (16-bit types through float, as parity::from_double).
template <typename V> __device__ inline void store_value(V& dst, double x) {
  if constexpr (std::is_same<V, double>::value) dst = x;
  else store(dst, static_cast<float>(x));
}

template <typename V, typename S>
__global__ void sgd_kernel(V* value, const V* grad, S* buffer, int64_t n, S lr, S mu, S wd) {
  PARITY_GRID_STRIDE(i, n) {
    const S p = to_state<S>(value[i]);
    S d = to_state<S>(grad[i]) + wd * p;
    if (buffer != nullptr) d = buffer[i] = mu * buffer[i] + d;
    store_value(value[i], static_cast<double>(p - lr * d));
  }
}

template <typename V, typename S>
__global__ void adamw_kernel(V* value, const V* grad, S* m, S* v, int64_t n, S lr, S b1, S b2, S one_minus_b1,
                             S one_minus_b2, S eps, S wd, S correction1, S correction2) {
  PARITY_GRID_STRIDE(i, n) {
    S p = to_state<S>(value[i]);
    const S g = to_state<S>(grad[i]);
    p -= lr * wd * p;
    m[i] = b1 * m[i] + one_minus_b1 * g;
    v[i] = b2 * v[i] + one_minus_b2 * g * g;
    p -= lr * (m[i] / correction1) / (dsqrt(v[i] / correction2) + eps);
    store_value(value[i], static_cast<double>(p));
  }
}

}  // namespace

void sgd_update(int value_dtype, int state_dtype, void* value, const void* grad, void* buffer, int64_t count,
                double learning_rate, double momentum, double weight_decay) {
  visit_floating(value_dtype, "sgd_update", [&](auto value_tag) {
    using V = decltype(value_tag);
    visit_wide(state_dtype, "sgd_update", [&](auto state_tag) {
      using S = decltype(state_tag);
      sgd_kernel<V, S><<<blocks_for(count), kThreads, 0, stream()>>>(
          static_cast<V*>(value), static_cast<const V*>(grad), static_cast<S*>(buffer), count,
          static_cast<S>(learning_rate), static_cast<S>(momentum), static_cast<S>(weight_decay));
    });
  });
  check_launch("sgd_kernel");
}

void adamw_update(int value_dtype, int state_dtype, void* value, const void* grad, void* m, void* v, int64_t count,
                  double learning_rate, double beta1, double beta2, double epsilon, double weight_decay,
                  double correction1, double correction2) {
  visit_floating(value_dtype, "adamw_update", [&](auto value_tag) {
    using V = decltype(value_tag);
    visit_wide(state_dtype, "adamw_update", [&](auto state_tag) {
      using S = decltype(state_tag);
      adamw_kernel<V, S><<<blocks_for(count), kThreads, 0, stream()>>>(
          static_cast<V*>(value), static_cast<const V*>(grad), static_cast<S*>(m), static_cast<S*>(v), count,
          static_cast<S>(learning_rate), static_cast<S>(beta1), static_cast<S>(beta2),
          // 1 - beta in float64, rounded once (as on the CPU): in S it would cancel.
          static_cast<S>(1 - beta1), static_cast<S>(1 - beta2), static_cast<S>(epsilon),
          static_cast<S>(weight_decay), static_cast<S>(correction1), static_cast<S>(correction2));
    });
  });
  check_launch("adamw_kernel");
}

}  // namespace parity::ops::device

#endif
