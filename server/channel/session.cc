#include "server/channel/session.h"

#include <utility>

namespace cubed {
namespace {

// A bijection on 64-bit values (the splitmix64 finalizer): distinct serials give distinct ids,
// and consecutive serials give ids that look unrelated.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

Session::Session(SessionId id, absl::Duration lease, absl::Time now, uint64_t id_key,
                 MemoryOwner memory_owner, PrincipalPtr owner)
    : id_(id),
      memory_owner_(memory_owner),
      owner_(std::move(owner)),
      lease_(lease),
      opened_(now),
      last_used_(now),
      id_key_(id_key) {}

HandleId Session::AddHandle(SliceId slice, uint64_t size) {
  HandleId id;
  do {  // 0 means "no handle" on the wire; ids with the top bit set are the client's.
    id = HandleId(Mix(next_serial_++ ^ id_key_) & ~kFirstClientId);
  } while (id.value() == 0 || InUse(id));
  handles_.emplace(id, HandleEntry{slice, size, 1});
  return id;
}

void Session::AddHandleWithId(HandleId id, SliceId slice, uint64_t size) {
  handles_.emplace(id, HandleEntry{slice, size, 1});
}

RegionId Session::AddRegion(std::shared_ptr<SharedRegion> region) {
  RegionId id;
  do {
    id = RegionId(Mix(next_serial_++ ^ id_key_));
  } while (id.value() == 0 || regions_.contains(id));
  regions_.emplace(id, std::move(region));
  return id;
}

const std::shared_ptr<SharedRegion>* Session::FindRegion(RegionId id) const {
  auto it = regions_.find(id);
  return it == regions_.end() ? nullptr : &it->second;
}

RecordedGraph* Session::FindGraph(GraphId id) {
  auto it = graphs_.find(id);
  return it == graphs_.end() ? nullptr : it->second.get();
}

void Session::AddGraph(std::unique_ptr<RecordedGraph> graph) {
  const GraphId id = graph->id();
  graphs_.insert_or_assign(id, std::move(graph));
}

std::unique_ptr<RecordedGraph> Session::TakeGraph(GraphId id) {
  auto it = graphs_.find(id);
  if (it == graphs_.end()) return nullptr;
  std::unique_ptr<RecordedGraph> graph = std::move(it->second);
  graphs_.erase(it);
  return graph;
}

std::optional<uint64_t> Session::DropSliceHold(SliceId slice) {
  auto it = slice_holds_.find(slice);
  if (it == slice_holds_.end() || --it->second.graphs > 0) return std::nullopt;
  const std::optional<uint64_t> orphan = it->second.orphan_size;
  slice_holds_.erase(it);
  return orphan;
}

std::vector<std::pair<SliceId, uint64_t>> Session::Orphans() const {
  std::vector<std::pair<SliceId, uint64_t>> orphans;
  for (const auto& [slice, hold] : slice_holds_) {
    if (hold.orphan_size.has_value()) orphans.emplace_back(slice, *hold.orphan_size);
  }
  return orphans;
}

HandleEntry* Session::Find(HandleId handle) {
  auto it = handles_.find(handle);
  return it == handles_.end() ? nullptr : &it->second;
}

}  // namespace cubed
