// src/pm/slot.h — the 16-byte persistent key/value slot every bucket-based index stores.
//
// Two 8-byte words, each written with one failure-atomic 8-byte store (x86-64: an aligned
// 8-byte store reaches the media whole, whatever the line does). What the words mean is the
// index's business: REH and Pea store the key and the value; TurboHash stores the key and the
// value (turbo) or the key's hash and a record offset (turbo-kv). Whether a slot is live is
// never decided by the slot alone: a header word (bitmap, meta word) published after the slot
// is persisted says so, which is what makes an insert crash-atomic.
#pragma once

#include <atomic>
#include <cstdint>

namespace pmhash::pm {

struct PmSlot {
  std::atomic<uint64_t> key;
  std::atomic<uint64_t> value;
};
static_assert(sizeof(PmSlot) == 16, "a slot is one 16 B key/value unit");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "8-byte failure-atomic stores");

}  // namespace pmhash::pm
