// The dropout mask's random numbers on the device: Philox 4x32-10 as reference/tensor/random.cpp
// draws them, written once for host and device (units/dropout.cpp's kernel calls it), so that
// the host can check it against the CPU generator. Plain C++17, for nvcc.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PARITY_HOST_DEVICE __host__ __device__
#else
#define PARITY_HOST_DEVICE
#endif

namespace parity::ops::device {

struct PhiloxWords {
  std::uint32_t w[4];
};

// Ten rounds of Philox 4x32 on counter c under key (k0, k1) (the Random123 constants).
PARITY_HOST_DEVICE inline PhiloxWords philox4x32_10(PhiloxWords c, std::uint32_t k0, std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c.w[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c.w[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    const PhiloxWords next = {{hi1 ^ c.w[1] ^ k0, lo1, hi0 ^ c.w[3] ^ k1, lo0}};
    c = next;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// Uniform in (0, 1) for element i of stream `stream` under `seed`: counter (i, stream), key
// seed, the first two words' top 52 bits as (m + 0.5) / 2^52 (parity::uniform_open exactly).
PARITY_HOST_DEVICE inline double philox_uniform_open(std::uint64_t seed, std::uint64_t stream, std::uint64_t i) {
  const PhiloxWords counter = {{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32),
                                static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)}};
  const PhiloxWords w =
      philox4x32_10(counter, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  const std::uint64_t bits = ((static_cast<std::uint64_t>(w.w[0]) << 32) | w.w[1]) >> 12;
  return (static_cast<double>(bits) + 0.5) * (1.0 / 4503599627370496.0);  // 2^-52
}

// Whether dropout with probability p keeps element `index` (a global element index).
PARITY_HOST_DEVICE inline bool dropout_keeps(double p, std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return p == 0 || philox_uniform_open(seed, stream, index) >= p;
}

}  // namespace parity::ops::device
