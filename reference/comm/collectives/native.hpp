// What a collective's file (this folder) is written with: its descriptor's type and shared
// parts, the MPI names, the buffer kernels, and the NCCL names where CUDA is built.
#pragma once

#include "reference/comm/collectives.hpp"
#include "reference/comm/mpi_native.hpp"
#include "reference/kernels/buffer_kernels.hpp"
#if PARITY_HAVE_CUDA
#include "reference/comm/nccl_native.hpp"
#endif
