// The pinned slots EdgeStatsRead writes a new graph's statistics into
// (graph_build.h): kept per device for the life of the process and handed
// from read to read, so a read allocates no pinned memory and creates no
// event (inside a small mini-batch step on an H200 host, a read's start took
// about 48 us of host time this way against about 61 us with a pinned
// allocation and an event of its own; docs/results.md).
#include <deque>
#include <mutex>
#include <unordered_map>

#include "graph_build.h"
#include "pyg_ioaware.h"

namespace pygio_host {

namespace {

struct SlotPool {
  std::mutex mutex;
  // Per device; a deque, so that slots never move. Slots are only added:
  // as many as reads were ever held at once (one per new graph in a step).
  std::unordered_map<c10::DeviceIndex, std::deque<StatsSlot>> slots;
};

// Never destroyed: the slots' events and pinned rows must not be freed
// after CUDA shuts down at exit.
SlotPool& pool() {
  static SlotPool* const instance = new SlotPool();
  return *instance;
}

}  // namespace

StatsSlot* take_stats_slot(c10::DeviceIndex device) {
  SlotPool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  std::deque<StatsSlot>& slots = p.slots[device];
  for (StatsSlot& slot : slots) {
    // A read dropped unread gave its slot back while its kernel may run.
    if (!slot.taken && (slot.waited || slot.written.query())) {
      slot.taken = true;
      slot.waited = false;
      return &slot;
    }
  }
  StatsSlot& slot = slots.emplace_back();
  slot.rows = torch::empty({PYGIO_EDGE_STATS_BLOCKS, PYGIO_EDGE_STATS},
                           torch::dtype(torch::kLong).pinned_memory(true));
  slot.taken = true;
  return &slot;
}

void release_stats_slot(StatsSlot* slot) {
  if (slot == nullptr) return;
  std::lock_guard<std::mutex> lock(pool().mutex);
  slot->taken = false;
}

}  // namespace pygio_host
