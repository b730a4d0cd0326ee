// Philox 4x32-10 and deterministic tensor initialisation (see random.hpp).
#include "reference/tensor/random.hpp"

#include <cmath>
#include <numbers>

#include "reference/core/error.hpp"
#include "reference/simd/simd.hpp"

namespace parity {

PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

std::uint64_t tensor_id(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

PhiloxCounter element_words(std::uint64_t seed, std::uint64_t id, std::uint64_t i) {
  const PhiloxCounter counter = {static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32),
                                 static_cast<std::uint32_t>(id), static_cast<std::uint32_t>(id >> 32)};
  return philox4x32_10(counter, {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
}

namespace {
// 52 bits from two words as a double in (0, 1): (m + 0.5) / 2^52, exact, at most 1 - 2^-53.
// (With 53 bits, m + 0.5 would need 54 and the largest m would round up to 1.)
double open_unit(std::uint32_t high, std::uint32_t low) {
  const std::uint64_t bits = ((static_cast<std::uint64_t>(high) << 32) | low) >> 12;
  return (static_cast<double>(bits) + 0.5) * 0x1p-52;
}
}  // namespace

double uniform_open(std::uint64_t seed, std::uint64_t id, std::uint64_t i) {
  const PhiloxCounter w = element_words(seed, id, i);
  return open_unit(w[0], w[1]);
}

double standard_normal(std::uint64_t seed, std::uint64_t id, std::uint64_t i) {
  const PhiloxCounter w = element_words(seed, id, i);
  const double u1 = open_unit(w[0], w[1]), u2 = open_unit(w[2], w[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

std::uint64_t uniform_open_threshold(double p) {
  constexpr std::uint64_t kDraws = std::uint64_t{1} << 52;
  if (!(p > 0)) return 0;
  const double t = p * 0x1p52;  // exact: a power-of-two scale
  if (t > static_cast<double>(kDraws)) return kDraws;
  // m + 0.5 >= t, both sides exact in double: the smallest such m, from floor(t) by a step or two.
  auto m = static_cast<std::uint64_t>(t);
  while (m > 0 && static_cast<double>(m - 1) + 0.5 >= t) --m;
  while (m < kDraws && static_cast<double>(m) + 0.5 < t) ++m;
  return m;
}

namespace {
// A value of init from the words of its element (Init::value's formulas).
double value_of(const Init& init, std::uint64_t bits01, std::uint64_t bits23) {
  const auto open = [](std::uint64_t bits) { return (static_cast<double>(bits >> 12) + 0.5) * 0x1p-52; };
  switch (init.kind) {
    case Init::Kind::normal:
      return init.a + init.b * (std::sqrt(-2.0 * std::log(open(bits01))) * std::cos(2.0 * std::numbers::pi * open(bits23)));
    case Init::Kind::uniform: return init.a + (init.b - init.a) * open(bits01);
    case Init::Kind::constant: return init.a;
    case Init::Kind::token_ids: break;
  }
  return static_cast<double>((bits01 >> 32) % static_cast<std::uint64_t>(init.a));
}

// Fills elements [0, n) of a host tensor with init's values of the global elements index(j), a
// chunk of consecutive global indices at a time through the vectorised Philox.
template <typename Index> void fill_host(Tensor& t, const Init& init, std::uint64_t seed, std::uint64_t id, std::int64_t n,
                                         const Index& index) {
  constexpr std::int64_t kChunk = 1024;
  std::uint64_t bits01[kChunk], bits23[kChunk];
  double values[kChunk];
  for (std::int64_t start = 0; start < n;) {
    // The longest run of consecutive global indices from `start`, at most a chunk.
    std::int64_t count = 1;
    while (start + count < n && count < kChunk && index(start + count) == index(start) + static_cast<std::uint64_t>(count)) ++count;
    simd::philox_bits(seed, id, index(start), static_cast<std::size_t>(count), bits01,
                      init.kind == Init::Kind::normal ? bits23 : nullptr);
    const bool normal = init.kind == Init::Kind::normal;
    for (std::int64_t j = 0; j < count; ++j) values[j] = value_of(init, bits01[j], normal ? bits23[j] : 0);
    visit_data_type(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* out = t.data<T>() + start;
      for (std::int64_t j = 0; j < count; ++j) out[j] = from_double<T>(values[j]);
    });
    start += count;
  }
}
}  // namespace

Init Init::tokens(std::int64_t vocabulary) {
  require(vocabulary > 0, "token ids need a positive vocabulary size, not " + std::to_string(vocabulary));
  return {Kind::token_ids, static_cast<double>(vocabulary), 0};
}

double Init::value(std::uint64_t seed, std::uint64_t id, std::uint64_t i) const {
  switch (kind) {
    case Kind::normal: return a + b * standard_normal(seed, id, i);
    case Kind::uniform: return a + (b - a) * uniform_open(seed, id, i);
    case Kind::constant: return a;
    case Kind::token_ids: break;
  }
  const auto vocabulary = static_cast<std::uint64_t>(a);
  return static_cast<double>(element_words(seed, id, i)[0] % vocabulary);
}

ShardSpec::ShardSpec(Shape whole) : whole_(std::move(whole)) {
  for (auto size : whole_) {
    std::vector<std::int64_t> all(static_cast<std::size_t>(size));
    for (std::int64_t j = 0; j < size; ++j) all[static_cast<std::size_t>(j)] = j;
    keep_.push_back(std::move(all));
  }
}

ShardSpec& ShardSpec::range(int d, std::int64_t begin, std::int64_t end) {
  require(d >= 0 && d < static_cast<int>(whole_.size()), "shard: no dimension " + std::to_string(d) + " in " + to_string(whole_));
  require(0 <= begin && begin < end && end <= whole_[static_cast<std::size_t>(d)],
          "shard: range [" + std::to_string(begin) + ", " + std::to_string(end) + ") outside dimension " +
              std::to_string(d) + " of " + to_string(whole_));
  std::vector<std::int64_t> keep;
  for (std::int64_t j = begin; j < end; ++j) keep.push_back(j);
  keep_[static_cast<std::size_t>(d)] = std::move(keep);
  return *this;
}

ShardSpec& ShardSpec::indices(int d, std::vector<std::int64_t> keep) {
  require(d >= 0 && d < static_cast<int>(whole_.size()), "shard: no dimension " + std::to_string(d) + " in " + to_string(whole_));
  require(!keep.empty(), "shard: no indices kept in dimension " + std::to_string(d));
  for (auto j : keep)
    require(0 <= j && j < whole_[static_cast<std::size_t>(d)], "shard: index " + std::to_string(j) +
                                                                   " outside dimension " + std::to_string(d) + " of " + to_string(whole_));
  keep_[static_cast<std::size_t>(d)] = std::move(keep);
  return *this;
}

ShardSpec& ShardSpec::split(int d, int part, int parts) {
  require(d >= 0 && d < static_cast<int>(whole_.size()), "shard: no dimension " + std::to_string(d) + " in " + to_string(whole_));
  const std::int64_t size = whole_[static_cast<std::size_t>(d)];
  require(parts > 0 && size % parts == 0 && part >= 0 && part < parts,
          "shard: dimension " + std::to_string(d) + " of " + to_string(whole_) + " does not split into " +
              std::to_string(parts) + " equal parts");
  const std::int64_t n = size / parts;
  return range(d, part * n, (part + 1) * n);
}

Shape ShardSpec::shape() const {
  Shape s;
  for (const auto& k : keep_) s.push_back(static_cast<std::int64_t>(k.size()));
  return s;
}

std::vector<std::int64_t> ShardSpec::global_indices() const {
  std::vector<std::int64_t> out{0};
  for (std::size_t d = 0; d < whole_.size(); ++d) {
    std::vector<std::int64_t> next;
    next.reserve(out.size() * keep_[d].size());
    for (auto base : out)
      for (auto j : keep_[d]) next.push_back(base * whole_[d] + j);
    out = std::move(next);
  }
  return out;
}

void initialize(Tensor& t, const Init& init, std::uint64_t seed) {
  const std::uint64_t id = tensor_id(t.name());
  if (t.space() == MemorySpace::host)
    return fill_host(t, init, seed, id, t.numel(), [](std::int64_t j) { return static_cast<std::uint64_t>(j); });
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, init.value(seed, id, static_cast<std::uint64_t>(i)));
}

void initialize_shard(Tensor& t, const Init& init, std::uint64_t seed, std::string_view whole_name,
                      const ShardSpec& spec) {
  if (t.shape() != spec.shape())
    throw Error("shard " + t.describe() + " does not have the shard's shape " + to_string(spec.shape()) + " of " +
                std::string(whole_name) + " " + to_string(spec.whole()));
  const std::uint64_t id = tensor_id(whole_name);
  const auto global = spec.global_indices();
  if (t.space() == MemorySpace::host)
    return fill_host(t, init, seed, id, static_cast<std::int64_t>(global.size()),
                     [&](std::int64_t j) { return static_cast<std::uint64_t>(global[static_cast<std::size_t>(j)]); });
  for (std::size_t i = 0; i < global.size(); ++i)
    t.set(static_cast<std::int64_t>(i), init.value(seed, id, static_cast<std::uint64_t>(global[i])));
}

Tensor slice(const Tensor& whole, const ShardSpec& spec, std::string name, MemoryCategory category) {
  if (whole.shape() != spec.whole())
    throw Error("cannot slice " + whole.describe() + " by a shard of " + to_string(spec.whole()));
  Tensor t = Tensor::empty(std::move(name), spec.shape(), whole.dtype(), category, whole.space());
  const auto global = spec.global_indices();
  for (std::size_t i = 0; i < global.size(); ++i) t.set(static_cast<std::int64_t>(i), whole.at(global[i]));
  return t;
}

}  // namespace parity
