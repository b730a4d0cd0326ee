// Context parallelism: the sequence of T tokens over the cp ranks of a group, in 2 cp chunks of
// T / (2 cp), rank r holding chunks r and 2 cp - 1 - r, so that every rank's queries see as many
// keys under the causal mask (the load balance of Megatron-core and Llama 3). Everything but
// attention is token-wise and runs on a rank's own rows; attention needs every key at or before
// a query, which the variants bring in two ways:
//
//   allgather  every rank's keys and values all-gathered once (as Llama 3 trained), the rank's
//              queries against all of them; backward all-gathers them again and reduce-scatters
//              the keys' and values' gradients back to their ranks.
//   ring       the keys and values passed around the ring, cp - 1 times (Liu et al. 2023), the
//              next block's transfer posted before the current block is computed; the blocks'
//              results merged by the online softmax (ops::attention_merge). Backward passes the
//              blocks around again, each with its dK and dV, which arrive back at their owner.
//   ulysses    all-to-alls from the sequence split to a head split (Jacobs et al. 2023,
//              DeepSpeed-Ulysses): every rank attends the whole sequence for heads / cp heads,
//              and its output goes back to the sequence split by another all-to-all (heads a
//              multiple of cp). Backward moves dO, Q, K, V, O and the log-sum-exp to the head
//              split and dQ, dK, dV back.
//
// The attention of a block is ops::attention_block_forward / _backward: queries and keys carry
// their positions in the whole sequence, which is what the causal mask follows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/comm/communicator.hpp"
#include "reference/tensor/tensor.hpp"

namespace parity::parallel {

struct ContextParallelConfig {
  std::string variant = "ring";  // ring, allgather, ulysses
  // A deliberate bug, for the checks to catch (empty: none):
  //   no_reorder       split() takes contiguous rows while the positions are the balanced ones
  //   missing_rescale  the ring adds the blocks' outputs without the online softmax's rescale
  //   wrong_neighbour  the ring sends to rank r + 2 and receives from r - 2
  std::string fault;
  // The ring posts the next block's transfer before computing the current one (true), or waits
  // for it first (false: the same transfers without overlap, the baseline bench context measures
  // the hidden share against). The results are the same bit for bit.
  bool overlap = true;
};

class ContextParallel {
 public:
  // Refuses an unknown variant or fault (UsageError).
  ContextParallel(Communicator& group, ContextParallelConfig config);
  Communicator& group() const { return group_; }
  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }
  const ContextParallelConfig& config() const { return config_; }
  void set_overlap(bool overlap) { config_.overlap = overlap; }

  // The positions in the whole sequence of the tokens rank `rank` holds, in its order: chunk r,
  // then chunk 2 cp - 1 - r. UsageError when 2 cp does not divide the sequence.
  std::vector<std::int64_t> positions(std::int64_t sequence, int rank) const;
  std::vector<std::int64_t> positions(std::int64_t sequence) const { return positions(sequence, rank()); }
  // This rank's rows (dimension 1) of a whole [B, T, ...] tensor, in positions() order.
  Tensor split(const Tensor& whole) const;
  // The whole [B, T, ...] from every rank's rows (collective).
  Tensor gather(const Tensor& local, std::int64_t sequence);

  // Causal attention of this rank's queries q [B, Tl, C] (Tl = T / cp) against the keys and
  // values of the whole sequence, which the ranks hold as k, v [B, Tl, C]: out [B, Tl, C] and
  // the log-sum-exp lse [B, heads, Tl] that backward reads. Collective over the group.
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t sequence, int heads, Tensor& out,
                         Tensor& lse);
  // dq, dk, dv (this rank's keys and values, summed over every rank's queries) are overwritten.
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, std::int64_t sequence, int heads, Tensor& dq, Tensor& dk, Tensor& dv);

  // Bytes this rank sent in the group since the last reset, forward and backward.
  double forward_bytes() const { return forward_bytes_; }
  double backward_bytes() const { return backward_bytes_; }
  // Seconds since the last reset in attention_forward and _backward, and the part of them this
  // rank waited on the group (collectives, and the ring's transfers not yet complete when their
  // block was wanted).
  double attention_seconds() const { return attention_seconds_; }
  double communication_seconds() const { return communication_seconds_; }
  void reset_counters() { forward_bytes_ = backward_bytes_ = attention_seconds_ = communication_seconds_ = 0; }

 private:
  // The keys and values of every rank, all-gathered, as [B, cp Tl, C] in rank order, with
  // their positions.
  void gather_keys(const Tensor& k, const Tensor& v, std::int64_t sequence, Tensor& k_all, Tensor& v_all,
                   std::vector<std::int64_t>& positions_all, double& bytes);
  int next() const;
  int previous() const;
  // Ulysses' all-to-alls: a sequence shard [B, Tl, C] to a head shard [B, T, C / cp] (rows in
  // rank order) and back; the log-sum-exp [B, H, Tl] to [B, H / cp, T] and back.
  Tensor to_heads(const Tensor& x, double& bytes);
  Tensor to_sequence(const Tensor& y, double& bytes);
  Tensor lse_to_heads(const Tensor& lse, double& bytes);
  Tensor lse_to_sequence(const Tensor& lse, double& bytes);
  // One step of the ring for a pair of tensors: a and b sent to the next rank and their
  // successors received into into_a and into_b from the previous one (tags `tag`, `tag` + 1);
  // adds the bytes sent to `bytes`. Complete the requests before touching the buffers.
  std::vector<RequestPtr> pass_on(const Tensor& a, const Tensor& b, Tensor& into_a, Tensor& into_b, int tag,
                                  double& bytes);
  // Runs f, adding its seconds to communication_seconds_.
  template <typename F> void waited(F&& f);
  Communicator& group_;
  ContextParallelConfig config_;
  double forward_bytes_ = 0, backward_bytes_ = 0, attention_seconds_ = 0, communication_seconds_ = 0;
};

}  // namespace parity::parallel
