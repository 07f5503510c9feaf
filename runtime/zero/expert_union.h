#pragma once
// The experts of one mixture layer that any rank routed a token to.
//
// Note [Experts on every rank]: with the parameters sharded over the ranks, fetching a module is
// a collective (an all-gather of its shards; for a resident module, the gather of its updated
// shards) and every rank must issue the same ones in the same order (Note [Collective order] in
// runtime/comm/sequencer.h). Each rank routes its own tokens, so a layer fetches the experts any
// rank's tokens were routed to: the union taken here, a max over the ranks of one flag per
// expert, issued by the trainer thread in program order with the other collectives. models/moe/
// moe_mlp.cpp then fetches every expert of the union in expert order, computing nothing for those
// without a row on this rank (their gradient here is zero). Two ranks of mixtral-tiny that each
// fetched only their own picks failed at the first step (MPI_ERR_TRUNCATE: one rank's all-gather
// matched the other's).
#include <cstdint>
#include <vector>

#include "runtime/comm/comm.h"
#include "runtime/device/device.h"

namespace strata::runtime::zero {

class ExpertUnion {
 public:
  // picked[e] != 0 where this rank routed a token to expert e; on return, where any rank did.
  // Every rank calls it at the same point. Waits for the collective on `stream` (and for the
  // work enqueued there before it).
  void unite(std::vector<std::uint8_t>& picked, comm::Communicator& comm, device::Device& device,
             device::Stream& stream);

 private:
  device::DeviceBuffer flags_;  // one float per expert, allocated at first use
};

}  // namespace strata::runtime::zero
