#include "server/service/stream/stream_batch.h"

#include <iterator>

namespace cubed {

// Note [Coalesced batches]: a SessionRequest that arrives while earlier ones still wait for the
// loop joins the last of them (CoalesceInto), up to kMaxMergedCommands waiting in it. The command
// ring carries one command a request when its reader keeps up with the client (a daemon thread
// spinning on the ring reads each record as it lands), and the loop paid per batch what it pays per
// request over gRPC, where a request carries ~256: two locks, the session lookup, the claim; and a
// claim of executes, which holds their launches back to send them together (Note [Launch batches],
// server/compute/cuda/cuda_launch_batch.h), never reaches past its batch, so one-command batches
// launched one by one. Pipelined launches ran faster over TCP than over the ring on the H200
// (GPU runs 90 and 94: 882k against 458k cmd/s, 716k against 573k). A request that finds the
// queue empty is a batch of its own, as before: a lone command waits for nothing. The merged
// batch keeps the earlier arrival (its commands' queue times count from it), adds the bytes and
// the principal's in-flight slots; the open batch is never merged into. Only a batch nothing has
// run from takes more: one the loop put back part-run (its turn ended) would keep growing under a
// steady client and hold its run commands, their bytes and slots until it ended (a helper's
// review). Not for a principal with in-flight quotas: a batch gives its slots back when it ends,
// so merged commands would hold theirs longer than their own requests did.

bool CoalesceInto(StreamBatch& last, StreamBatch& incoming, bool quotas,
                  std::vector<StreamCommand>& recycled) {
  if (last.next != 0 || last.open || incoming.open || quotas ||
      last.commands.size() + incoming.commands.size() > kMaxMergedCommands) {
    return false;
  }
  last.commands.insert(last.commands.end(), std::make_move_iterator(incoming.commands.begin()),
                       std::make_move_iterator(incoming.commands.end()));
  last.bytes += incoming.bytes;
  last.inflight.Absorb(std::move(incoming.inflight));
  incoming.commands.clear();  // Moved-from commands: their room holds the next request.
  if (incoming.commands.capacity() > recycled.capacity()) recycled.swap(incoming.commands);
  return true;
}

}  // namespace cubed
