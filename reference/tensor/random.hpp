// Counter-based random numbers: Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC 2011). Element i of a named tensor is a pure function of (seed, tensor id, i),
// with the tensor id a hash of its name, so any rank makes any shard of any tensor without
// communication and the single-device reference makes the same values whole.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "reference/tensor/tensor.hpp"

namespace parity {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;
// Ten rounds of Philox 4x32 (the Random123 constants).
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// 64-bit FNV-1a of a name: the stream a tensor's values are drawn from.
std::uint64_t tensor_id(std::string_view name);

// The random words of element i of stream `id` under `seed`: counter (i, id), key seed.
PhiloxCounter element_words(std::uint64_t seed, std::uint64_t id, std::uint64_t i);
// Uniform in (0, 1): 52 random bits, never 0 (so log() is safe) and never 1.
double uniform_open(std::uint64_t seed, std::uint64_t id, std::uint64_t i);
// Standard normal by Box-Muller from the four words of element i.
double standard_normal(std::uint64_t seed, std::uint64_t id, std::uint64_t i);
// The 52 bits m of uniform_open ((m + 0.5) / 2^52) from which it is at least p: uniform_open >= p
// exactly when m >= uniform_open_threshold(p) (0 for p <= 0; 2^52 for p beyond every draw).
std::uint64_t uniform_open_threshold(double p);

// How a tensor is initialised: every element a pure function of (seed, name, global index).
struct Init {
  enum class Kind { normal, uniform, constant, token_ids } kind = Kind::normal;
  double a = 0;  // normal: mean; uniform: low; constant: value; token_ids: vocabulary size
  double b = 1;  // normal: standard deviation; uniform: high
  static Init normal(double mean, double stddev) { return {Kind::normal, mean, stddev}; }
  static Init uniform(double low, double high) { return {Kind::uniform, low, high}; }
  static Init constant(double value) { return {Kind::constant, value, 0}; }
  static Init tokens(std::int64_t vocabulary);
  // The value of global element i of the tensor named `name`.
  double value(std::uint64_t seed, std::uint64_t id, std::uint64_t i) const;
};

// Which part of a whole tensor a shard holds: for every dimension, the global indices it keeps,
// in order. Rows, columns, batch and contiguous ranges are one range; a head split of a fused
// QKV weight keeps several ranges of the column dimension.
class ShardSpec {
 public:
  explicit ShardSpec(Shape whole);  // the whole tensor
  const Shape& whole() const { return whole_; }
  // Keep [begin, end) of dimension d.
  ShardSpec& range(int d, std::int64_t begin, std::int64_t end);
  // Keep these global indices of dimension d.
  ShardSpec& indices(int d, std::vector<std::int64_t> keep);
  // Part `part` of `parts` equal contiguous parts of dimension d (d's size divisible by parts).
  ShardSpec& split(int d, int part, int parts);
  Shape shape() const;
  // Global row-major index of every element of the shard, in the shard's row-major order.
  std::vector<std::int64_t> global_indices() const;

 private:
  Shape whole_;
  std::vector<std::vector<std::int64_t>> keep_;
};

// Fills `t` (the whole tensor) with init under (seed, t.name()).
void initialize(Tensor& t, const Init& init, std::uint64_t seed);
// Fills `t` with the shard `spec` of the whole tensor named `whole_name` (t's shape must be
// spec.shape()): identical to slicing the whole tensor.
void initialize_shard(Tensor& t, const Init& init, std::uint64_t seed, std::string_view whole_name,
                      const ShardSpec& spec);
// Copies the shard `spec` out of a whole tensor (the reference side of the shard checks).
Tensor slice(const Tensor& whole, const ShardSpec& spec, std::string name, MemoryCategory category);

}  // namespace parity
