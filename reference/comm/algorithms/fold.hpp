// Folding n ranks onto p = 2^floor(log2 n) participants, for the algorithms that need a power
// of two (recursive doubling, Rabenseifner): the first 2*(n - p) ranks pair up, the even one
// hands its data to the odd one and sits out, and gets the result back at the end.
#pragma once

#include "reference/comm/algorithms.hpp"

namespace parity::algorithms {

struct Fold {
  int p = 1;          // participating ranks
  int extra = 0;      // n - p ranks folded into a partner
  int new_rank = 0;   // rank among the p participants, -1 for a rank that sits out
  // Communicator rank of participant i.
  int actual(int participant) const { return participant < extra ? 2 * participant + 1 : participant + extra; }
};

Fold fold_ranks(const Communicator& comm);
// Before the main rounds: sitting-out ranks send their data to their partner, which reduces.
void fold_in(Communicator& comm, const Fold& f, BufferView data, ReduceOp op);
// After: sitting-out ranks receive the finished result.
void fold_out(Communicator& comm, const Fold& f, BufferView data);

}  // namespace parity::algorithms
