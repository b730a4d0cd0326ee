// An op unit (reference/ops/units/<pair>.cpp) is one file holding everything about one
// forward/backward pair: the argument check both devices run, the CPU body, the one dispatch
// point, and the CUDA kernels with their launchers. Where CUDA is built, CMake compiles each
// unit twice (reference/CMakeLists.txt): with the C++ compiler, which sees the host part, and
// with nvcc through a generated .cu file that includes every unit, which sees the device parts
// (so a unit's kernels and helpers stay in its own anonymous namespace). A unit reads
//
//   #include "reference/ops/unit.hpp"
//   namespace parity::ops::device { the launchers' declarations }   (both parts see them)
//   #ifndef __CUDACC__
//   the host part: the check, the CPU body, the dispatch (C++20, parity's headers)
//   #else
//   the device part: the kernels and the launchers' definitions (C++17, nvcc)
//   #endif
//
// Launchers take raw device pointers, sizes and parity::DataType as its integer value, so nvcc
// never compiles parity's C++20 headers. The dispatch, after the check, is
//
//   if constexpr (kCudaBuilt) {
//     if (on_device(x)) return device::launcher(...);
//   }
//
// kCudaBuilt is PARITY_HAVE_CUDA, a compile definition CMake sets on the library. Without CUDA
// no device part is compiled, so the launchers are declared and never defined: the call stands
// in a discarded statement of `if constexpr`, and a function used only there needs no
// definition ([basic.def.odr]: one is required for every function odr-used outside a discarded
// statement), so the library links without stubs, optimised or not. Such a build cannot hold a
// tensor on the device anyway (parity::cuda's stubs refuse device memory). The call is still
// compiled there, so both builds type-check the host side of every dispatch.
#pragma once

#if defined(__CUDACC__)
#include "reference/ops/unit_device.hpp"
#else
#include "reference/ops/unit_host.hpp"
#endif
