// src/index/smartht/smartht.h — SmartHT: chained hashing in PM behind a DRAM Bloom filter.
//
// Paper: Renzhi Xiao, Hong Jiang, Dan Feng et al. "Accelerating Persistent Hash Indexes via
// Reducing Negative Searches" (SmartHT; ../shared/papers/smartht.txt, section III; IV for the
// experiments).
//
// ============================================================================================
// Design summary
// ============================================================================================
// Two layers (paper Figure 2):
//
//   * The persistent data layer (PDL) is chained hashing in PM: a head-bucket array of 2^L
//     64 B buckets (L from SmartHtParams::head_bits, growing), each the start of a chain of
//     64 B buckets linked by pool offsets. A bucket holds three 16 B key/value slots, each made
//     live by its own 1-byte token in the same cache line.
//   * The volatile filter layer (VFL) is a DRAM Bloom filter over every live key. A search or
//     an erase whose key the filter rules out answers kNotFound without reading PM; an insert
//     whose key the filter rules out skips the duplicate check of the chain.
//
// Operations (head bucket H = heads[h >> (64 - L)], h the key's 64-bit hash):
//   * Insert (Algorithm 1): a free slot of H or of H's first chained bucket takes the pair:
//     key and value stored, then the token, then one flush + fence of that one line. Both full:
//     a new bucket is built with the pair in slot 0 and next = H.next, persisted, fenced; then
//     H.next = new bucket (one 8-byte store), persisted, fenced ("head insertion": the new
//     bucket becomes H's first chained bucket, where the next inserts go).
//   * Erase: the token is cleared and persisted (lazy deletion: no slot moves, no bucket is
//     unlinked; the filter keeps the erased key's bits until it is rebuilt).
//   * Update: one 8-byte store of the value, persisted.
//   * Find: the filter, then the chain from H, comparing the key of every slot whose token
//     matches (the token is a 7-bit fingerprint with the top bit set, not the paper's plain 1,
//     so most non-matching slots are skipped without reading their key).
//
// Concurrency (paper III-B): reader-writer spin locks, one per stripe of consecutive head
// buckets (stripe = the top S hash bits, S <= L; 256 heads per stripe on large tables, as in
// the paper, one head per stripe on tables of <= 64 heads). Reads take the stripe shared,
// writes exclusive; the lock is held across the persist, so no reader ever sees a write that a
// crash can undo. Structure changes (head-array doubling, the swap of a rebuilt filter) take
// every stripe exclusive, in order, under resize_mu_ (one resize at a time) and stw_mu_; an
// operation that sees such a stop-the-world phase under way sleeps on stw_mu_ instead of
// spinning on its stripe.
//
// Filter: a split-block Bloom filter: a key selects one 64 B block and sets one bit in each of
// its eight 64-bit words, so a query costs one DRAM cache miss. Sized for
// filter_bits_per_key bits per key of capacity (24: a false-positive rate near 1e-4, the
// paper's figure). It is rebuilt — a new filter filled from PM by a background task
// (pm::BackgroundWork) while the old one keeps serving, then swapped in — when the keys erased
// since the last build pass rebuild_erased_ratio of its capacity, and after a crash.
// While a filter is being filled, writers add their keys to it as well as to the live one.
//
// Growth (beyond the paper, which fixes 2^24 heads): when the table holds more than
// grow_keys_per_head keys per head, the head array doubles. First version: stop-the-world (all
// stripes exclusive) and crash-atomic by shadowing: the new array and every new chained bucket
// are written in fresh chunks, persisted, then ONE 8-byte root store switches to them; the old
// chunks are freed after. The filter is rebuilt for the new capacity in the same pass.
// Future work: an incremental, linear-hashing-style split of one head at a time.
//
// Recovery (paper III-D): after a clean shutdown the filter saved in the pool is loaded (its
// checksum, geometry and key count must match; otherwise it is rebuilt); after a crash the index
// serves at once with an empty, *incomplete* filter that a background task fills: while it is
// incomplete, negative searches go to PM, so the filter never gives a false negative. Open
// itself walks every chain once (reachability for the chunk allocator, every offset validated),
// which is the part not yet lazy.
//
// ============================================================================================
// Layout
// ============================================================================================
//   PM bucket, 64 B, 64-aligned (one cache line, one allocator chunk):
//
//     [ tok0 tok1 tok2 | pad:5 ][ key0 | val0 ][ key1 | val1 ][ key2 | val2 ][ next:8 ]
//       0    1    2      3..7     8              24             40             56
//
//     tok j: 0 = slot j free, 0x80 | (h & 0x7F) = slot j holds a live pair whose key hashes to h.
//     next:  pool offset of the next bucket of the chain, 0 = end.
//
//   Pool roots:
//     root 0  [ L:8 | head array offset:56 ]   the table: 2^L contiguous 64 B chunks
//     root 1  offset of the saved filter (clean shutdown only; cleared, persisted, at every
//             open before the first write)
//
//   Saved filter (chunks of 64 B, allocated at Close):
//     [ magic:8 | L:8 | blocks:8 | keys:8 | stale:8 | checksum:8 | pad:16 ][ blocks x 64 B ]
//     checksum = XXH3-64 of the blocks, seeded with the other header words.
//
//   DRAM: stripes (one 64 B line each: a RwSpinLock), the filter (blocks x 64 B), no per-bucket
//   metadata.
//
// ============================================================================================
// Crash-consistency invariants
// ============================================================================================
//   I1  A slot holds a live pair iff its token is non-zero; a non-zero token equals
//       Token(hash(key)) and the key's head is the bucket's chain head (recovery checks both).
//   I2  Insert into a free slot: key and value are stored before the token, all in one line, and
//       the line is flushed once: under whole-line write-back an image with the token has the
//       pair. With tear_safe the slot is persisted before the token is stored (8-byte model).
//   I3  If a bucket is reachable then its 64 bytes were persisted before the 8-byte store that
//       linked it (head insertion: NtCopy + fence, then H.next + persist).
//   I4  Erase clears one token (one byte, failure-atomic) and persists it; update stores one
//       8-byte value and persists it.
//   I5  Growth writes only fresh chunks until the root store; if root 0 names the new array,
//       every bucket reachable from it was persisted before (fence before the root store).
//   I6  No leak: the allocator's bitmap is rebuilt from root 0 at open; a bucket allocated but
//       not linked, a half-built table, the chunks of an old table and a saved filter are free.
//   I7  The saved filter is used only if the pool was shut down cleanly, root 1 names it, and
//       its checksum, geometry and key count match; root 1 is cleared (persisted) before the
//       first write of the open, so a filter can never be trusted for a pool changed after it
//       was saved.
//
// Thread safety: every public operation may run concurrently; Close() requires quiescence.
#pragma once

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/hash.h"
#include "common/huge_array.h"
#include "common/locks.h"
#include "common/mutex.h"
#include "common/resize_log.h"
#include "common/striped_counter.h"
#include "index/descriptor.h"
#include "index/engine_base.h"
#include "index/lifecycle.h"
#include "pm/background.h"
#include "pm/persist.h"
#include "pm/pool.h"
#include "pm/slot.h"
#include "pmhash/index.h"

namespace pmhash::smartht {

inline constexpr int kSlots = 3;
inline constexpr uint32_t kMinHeadBits = 1;
inline constexpr uint32_t kMaxHeadBitsLimit = 31;  // 2^31 heads = 128 GiB of head array
inline constexpr uint64_t kOffsetMask = (uint64_t{1} << 56) - 1;

using pm::PmSlot;

struct alignas(64) PmBucket {
  std::atomic<uint8_t> tokens[kSlots];
  uint8_t pad[5];
  PmSlot slots[kSlots];
  std::atomic<uint64_t> next;
};
static_assert(sizeof(PmBucket) == 64, "paper Figure 3: a bucket is one 64 B cache line");
static_assert(offsetof(PmBucket, slots) == 8, "slots are 8-byte aligned after the tokens");
static_assert(offsetof(PmBucket, next) == 56, "the next offset closes the line");
static_assert(std::atomic<uint8_t>::is_always_lock_free);

inline constexpr uint8_t Token(uint64_t h) { return static_cast<uint8_t>(0x80 | (h & 0x7F)); }
inline constexpr uint64_t PackRoot(uint32_t bits, uint64_t off) {
  return (uint64_t{bits} << 56) | (off & kOffsetMask);
}
inline constexpr uint32_t RootBits(uint64_t r) { return static_cast<uint32_t>(r >> 56); }
inline constexpr uint64_t RootOffset(uint64_t r) { return r & kOffsetMask; }

// The saved filter's header (one chunk), followed by the blocks.
struct SavedFilterHeader {
  uint64_t magic;
  uint64_t head_bits;
  uint64_t blocks;
  uint64_t keys;
  uint64_t stale;
  uint64_t checksum;
  uint64_t pad[2];
};
static_assert(sizeof(SavedFilterHeader) == 64);
inline constexpr uint64_t kSavedFilterMagic = 0x31544c4946485453ULL;  // "STHFILT1"

// Split-block Bloom filter: one 64 B block per key, one bit in each of its eight words.
class BloomFilter {
 public:
  static constexpr uint64_t kBlockBits = 512;

  BloomFilter() = default;
  explicit BloomFilter(uint64_t blocks) : words_(blocks * 8), blocks_(blocks) {}
  explicit operator bool() const { return static_cast<bool>(words_); }

  // Blocks for `keys` keys at `bits_per_key` bits each (at least one).
  static uint64_t BlocksFor(uint64_t keys, uint32_t bits_per_key) {
    return std::max<uint64_t>(1, (keys * bits_per_key + kBlockBits - 1) / kBlockBits);
  }

  void Add(uint64_t h) {
    std::atomic<uint64_t>* w = &words_[Block(h) * 8];
    const uint64_t bits = Bits(h);
    for (int i = 0; i < 8; i++) {
      const uint64_t m = uint64_t{1} << ((bits >> (i * 8)) & 63);
      if ((w[i].load(std::memory_order_relaxed) & m) == 0) {
        w[i].fetch_or(m, std::memory_order_relaxed);
      }
    }
  }
  bool MayContain(uint64_t h) const {
    const std::atomic<uint64_t>* w = &words_[Block(h) * 8];
    const uint64_t bits = Bits(h);
    bool all = true;
    for (int i = 0; i < 8; i++) {
      const uint64_t m = uint64_t{1} << ((bits >> (i * 8)) & 63);
      all &= (w[i].load(std::memory_order_relaxed) & m) != 0;
    }
    return all;
  }

  uint64_t blocks() const { return blocks_; }
  uint64_t bytes() const { return blocks_ * 64; }
  // Word i (for saving and loading; REQUIRES no concurrent Add).
  uint64_t Word(uint64_t i) const { return words_[i].load(std::memory_order_relaxed); }
  void SetWord(uint64_t i, uint64_t v) { words_[i].store(v, std::memory_order_relaxed); }

 private:
  uint64_t Block(uint64_t h) const {
    return static_cast<uint64_t>(
        (static_cast<__uint128_t>(Mix64(h, 0x9E3779B97F4A7C15ULL)) * blocks_) >> 64);
  }
  static uint64_t Bits(uint64_t h) { return Mix64(h ^ 0x5851F42D4C957F2DULL, 0xD6E8FEB86659FD93ULL); }

  HugeArray<std::atomic<uint64_t>> words_;
  uint64_t blocks_ = 0;
};

// The pool properties, as stored in the pool header (src/index/descriptor.h).
struct PersistentParams : index::LayoutWords<sizeof(PmBucket), kSlots> {
  uint32_t head_bits = 0;
  uint32_t max_head_bits = 0;
};

// What an open index runs with: the pool's properties and this open's options.
struct Config : PersistentParams {
  uint32_t filter_bits_per_key = 24;
  double grow_keys_per_head = 3.0;
  double rebuild_erased_ratio = 0.25;
  bool tear_safe = false;
  uint64_t save_filter_min_keys = 1024;
  uint32_t background_threads = 1;
  void SetOpenOptions(const Options& o) {
    filter_bits_per_key = std::clamp<uint32_t>(o.smartht.filter_bits_per_key, 1, 256);
    grow_keys_per_head = o.smartht.grow_keys_per_head;
    rebuild_erased_ratio = o.smartht.rebuild_erased_ratio;
    tear_safe = o.smartht.tear_safe;
    save_filter_min_keys = o.smartht.save_filter_min_keys;
    background_threads = o.background_threads;
  }
};

template <pm::PersistPolicy P>
class SmartHt;

struct Descriptor
    : index::DescriptorTypes<SmartHtParams, &Options::smartht, PersistentParams, SmartHt> {
  static constexpr std::string_view kName = "smartht";
  static constexpr std::string_view kPaper =
      "Xiao, Jiang, Feng et al.: Accelerating Persistent Hash Indexes via Reducing Negative "
      "Searches (SmartHT)";
  static constexpr std::string_view kSummary =
      "chained 64 B PM buckets, DRAM Bloom filter for negative searches, growing head array";
  static constexpr auto kProperties = std::tuple{
      index::PoolProperty{"smartht.head_bits", &Params::head_bits, &Stored::head_bits, 0u},
      index::PoolProperty{"smartht.max_head_bits", &Params::max_head_bits,
                          &Stored::max_head_bits, 28u},
  };
  static std::string Check(const Stored& s) {
    if (s.max_head_bits < kMinHeadBits || s.max_head_bits > kMaxHeadBitsLimit) {
      return "max_head_bits must be in [1, 31]";
    }
    if (s.head_bits != 0 && (s.head_bits < kMinHeadBits || s.head_bits > s.max_head_bits ||
                             s.head_bits > 26)) {
      return "head_bits must be 0 (from the pool size) or in [1, min(max_head_bits, 26)]";
    }
    return "";
  }
  static index::PoolLayout Layout(const Stored& s) {
    return {sizeof(PmBucket), s.head_bits ? uint64_t{1} << s.head_bits : 64};
  }
  // Three slots per 64 B bucket; at grow_keys_per_head = 3 the table averages about half full
  // just after a doubling (heads + chained buckets), and growth shadows the whole table. Plan
  // for 0.2 plus the filter saved at Close.
  static uint64_t EstimatePoolBytes(uint64_t keys) {
    return static_cast<uint64_t>(static_cast<double>(keys) * sizeof(PmBucket) / kSlots / 0.2) +
           keys * 4 + (uint64_t{64} << 10);
  }
};

template <pm::PersistPolicy P>
class SmartHt : public index::EngineBase<SmartHt<P>, P, Config> {
  PMHASH_ENGINE_BASE(P, Config, SmartHt<P>);
  PMHASH_ENGINE_API(SmartHt, Descriptor);  // Open, Find, Erase, ForEach, Stats, CheckInvariants

 public:
  ~SmartHt() { this->CloseUnlessAbandoned(); }  // src/index/lifecycle.h
  using Base::Size;

  // For tests, tools and the crash harness.
  pm::BackgroundWork& background() { return background_; }
  uint32_t head_bits() const { return log_seen_.load(std::memory_order_acquire); }
  // True if the filter is complete (every live key in it): negative searches skip PM.
  bool filter_complete() const { return complete_.load(std::memory_order_acquire); }
  // True if the open loaded the filter saved at the last Close.
  bool filter_loaded() const { return filter_loaded_; }
  // Whether the live filter may contain key k (tests: false-positive rate, no false negative).
  bool FilterMayContain(Key k) const;
  // Rebuilds the filter now, on the calling thread (tests; the index schedules it itself).
  Status RebuildFilter() { return RebuildFilterTask(); }

 private:
  using WriteMode = index::WriteMode;

  struct alignas(64) Stripe {
    mutable RwSpinLock lock;
  };

  SmartHt(std::unique_ptr<pm::Pool> pool, const Config& config);

  PmBucket* At(uint64_t off) const { return pool_->template At<PmBucket>(off); }
  size_t HeadIndex(uint64_t h) const { return log_ ? h >> (64 - log_) : 0; }
  size_t StripeOf(uint64_t h) const { return stripe_bits_ ? h >> (64 - stripe_bits_) : 0; }
  RwSpinLock& StripeLock(uint64_t h) const { return stripes_[StripeOf(h)].lock; }
  // Heads [first, last) of stripe s (under the current log_).
  void StripeHeads(size_t s, size_t* first, size_t* last) const {
    const uint32_t shift = log_ - stripe_bits_;
    *first = s << shift;
    *last = (s + 1) << shift;
  }
  // Locates k in the chain of head `head` (token t). REQUIRES: its stripe locked.
  bool Search(const PmBucket* head, Key k, uint8_t t, PmBucket** bucket, int* slot) const;
  static int FreeSlot(const PmBucket* b) {
    for (int j = 0; j < kSlots; j++) {
      if (b->tokens[j].load(std::memory_order_relaxed) == 0) return j;
    }
    return -1;
  }
  void LockAll() const PMHASH_NO_THREAD_SAFETY_ANALYSIS;
  void UnlockAll() const PMHASH_NO_THREAD_SAFETY_ANALYSIS;
  void WaitStopTheWorld() const PMHASH_NO_THREAD_SAFETY_ANALYSIS;
  // The lock of h's stripe, after waiting out a stop-the-world phase that is under way.
  RwSpinLock& StripeLockFor(uint64_t h) const {
    if (stw_.load(std::memory_order_relaxed)) [[unlikely]] WaitStopTheWorld();
    return StripeLock(h);
  }
  // Filter capacity (keys) of a table of 2^bits heads holding `keys` keys.
  uint64_t FilterKeysFor(uint32_t bits, uint64_t keys) const;
  void AddToFilters(uint64_t h);

  Status Write(Key k, Value v, WriteMode mode);
  // Doubles the head array if it still has 2^seen heads (no-op if another thread is resizing).
  Status Grow(uint32_t seen);
  Status GrowLocked();
  void MaybeGrow();
  void MaybeScheduleRebuild();
  Status RebuildFilterTask();

  Status Create();
  Status Recover();
  Status Quiesce();
  // Loads the filter saved at root 1 if it matches this table; false otherwise.
  bool LoadSavedFilter(uint64_t off, uint64_t live);
  Status SaveFilter();

  // Table: written only with every stripe locked (growth); read under any stripe lock.
  uint32_t log_ = 0;
  uint64_t heads_off_ = 0;
  PmBucket* heads_ = nullptr;
  std::atomic<uint32_t> log_seen_{0};  // log_, for unlocked readers (growth trigger, stats)
  uint32_t stripe_bits_ = 0;           // fixed for the life of the object, <= log_
  HugeArray<Stripe> stripes_;

  // Filter: replaced only with every stripe locked; read and added to under any stripe lock.
  std::unique_ptr<BloomFilter> filter_;
  std::atomic<BloomFilter*> building_{nullptr};  // being filled by a rebuild, or null
  std::atomic<bool> complete_{false};
  std::atomic<bool> rebuild_pending_{false};
  std::atomic<int64_t> stale_{0};         // keys erased since the filter was built
  std::atomic<uint64_t> filter_keys_{0};  // keys added since the filter was built
  std::atomic<uint64_t> filter_capacity_{0};  // keys the live filter was sized for
  bool filter_loaded_ = false;

  Mutex resize_mu_;  // growth and filter rebuilds, one at a time
  mutable Mutex stw_mu_;                  // held with every stripe (LockAll)
  mutable std::atomic<bool> stw_{false};  // a LockAll is under way
  std::atomic<uint64_t> chained_{0};       // chained buckets (not heads)
  std::atomic<uint64_t> links_{0};         // head insertions since open
  std::atomic<uint64_t> rebuilds_{0};      // filter rebuilds since open
  std::atomic<uint64_t> grow_failures_{0};
  std::atomic<uint64_t> no_grow_below_{0};  // after a failed growth: retry past this size
  mutable StripedCounter false_positives_;  // filter said maybe, PM said no (Find)

  pm::BackgroundWork background_;  // last: destroyed (joined) first
};

// ============================================================================================
// Implementation
// ============================================================================================

template <pm::PersistPolicy P>
SmartHt<P>::SmartHt(std::unique_ptr<pm::Pool> pool, const Config& config)
    : Base(std::move(pool), config),
      background_(pm::BackgroundOptions{config.background_threads, pool_->sim_hook()}) {}

template <pm::PersistPolicy P>
uint64_t SmartHt<P>::FilterKeysFor(uint32_t bits, uint64_t keys) const {
  const double per_head = params_.grow_keys_per_head > 0 ? params_.grow_keys_per_head : 3.0;
  const uint64_t cap = static_cast<uint64_t>(static_cast<double>(uint64_t{1} << bits) * per_head);
  return std::max<uint64_t>({64, cap, keys + keys / 4});
}

// Stop-the-world: operations that see stw_ wait on stw_mu_ (asleep) instead of spinning on a
// stripe lock the whole time a doubling runs.
template <pm::PersistPolicy P>
void SmartHt<P>::LockAll() const {
  stw_mu_.lock();
  stw_.store(true, std::memory_order_relaxed);
  for (size_t s = 0; s < stripes_.size(); s++) stripes_[s].lock.lock();
}
template <pm::PersistPolicy P>
void SmartHt<P>::UnlockAll() const {
  for (size_t s = stripes_.size(); s-- > 0;) stripes_[s].lock.unlock();
  stw_.store(false, std::memory_order_relaxed);
  stw_mu_.unlock();
}
template <pm::PersistPolicy P>
void SmartHt<P>::WaitStopTheWorld() const {
  stw_mu_.lock();
  stw_mu_.unlock();
}

template <pm::PersistPolicy P>
void SmartHt<P>::AddToFilters(uint64_t h) {
  filter_->Add(h);
  if (BloomFilter* b = building_.load(std::memory_order_acquire)) b->Add(h);
  filter_keys_.fetch_add(1, std::memory_order_relaxed);
}

template <pm::PersistPolicy P>
bool SmartHt<P>::FilterMayContain(Key k) const {
  const uint64_t h = hash_(k);
  RwSpinLock& l = StripeLock(h);
  l.lock_shared();
  const bool r = filter_->MayContain(h);
  l.unlock_shared();
  return r;
}

// The initial table: 2^head_bits empty heads (every byte written: the media may be dirty).
template <pm::PersistPolicy P>
Status SmartHt<P>::Create() {
  uint32_t bits = params_.head_bits;
  if (bits == 0) {
    const uint64_t heads = pool_->allocator().chunk_count() / 16;
    bits = std::min<uint32_t>(
        std::max<uint32_t>(heads ? static_cast<uint32_t>(std::bit_width(heads)) - 1 : 0, 6),
        std::min<uint32_t>(24, params_.max_head_bits));
  }
  const uint64_t n = uint64_t{1} << bits;
  auto off = pool_->allocator().Allocate(static_cast<uint32_t>(n));
  if (!off.ok()) return off.status();
  alignas(64) PmBucket zero[16];
  std::memset(static_cast<void*>(zero), 0, sizeof(zero));
  for (uint64_t i = 0; i < n; i += 16) {
    const uint64_t m = std::min<uint64_t>(16, n - i);
    persist_.NtCopy(At(off.value() + i * sizeof(PmBucket)), zero, m * sizeof(PmBucket));
  }
  persist_.Fence();
  pool_->SetRoot(0, PackRoot(bits, off.value()));
  pool_->SetRoot(1, 0);
  return pool_->CommitCreate();
}

// Walks every chain from root 0: reachability (cycles, shared and stray chunks are rejected by
// MarkReachable), tokens against keys (I1), live keys counted. Then the filter: the saved one
// (I7) or an incomplete one and a rebuild task.
template <pm::PersistPolicy P>
Status SmartHt<P>::Recover() {
  pm::ChunkAllocator& alloc = pool_->allocator();
  const uint64_t root = pool_->root(0);
  const uint32_t bits = RootBits(root);
  const uint64_t off = RootOffset(root);
  if (root == 0) return Status::Corruption("smartht: pool has no head array (root 0 is empty)");
  if (bits < kMinHeadBits || bits > params_.max_head_bits) {
    return Status::Corruption("smartht: head array of 2^" + std::to_string(bits) +
                              " buckets (max_head_bits " + std::to_string(params_.max_head_bits) +
                              ")");
  }
  const uint64_t n = uint64_t{1} << bits;
  if (Status s = alloc.MarkReachable(off, static_cast<uint32_t>(n)); !s.ok()) {
    return Status::Corruption("smartht: head array: " + std::string(s.message()));
  }
  uint64_t live = 0, chained = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t steps = 0;
    for (uint64_t b_off = off + i * sizeof(PmBucket); b_off != 0;) {
      const PmBucket* b = At(b_off);
      for (int j = 0; j < kSlots; j++) {
        const uint8_t t = b->tokens[j].load(std::memory_order_relaxed);
        if (t == 0) continue;
        const uint64_t h = hash_(b->slots[j].key.load(std::memory_order_relaxed));
        if (t != Token(h) || (h >> (64 - bits)) != i) {
          return Status::Corruption("smartht: bucket at offset " + std::to_string(b_off) +
                                    " slot " + std::to_string(j) + ": token " +
                                    std::to_string(t) + " does not match a key of head " +
                                    std::to_string(i));
        }
        live++;
      }
      const uint64_t next = b->next.load(std::memory_order_relaxed);
      if (next != 0) {
        if (++steps > alloc.chunk_count()) {
          return Status::Corruption("smartht: chain of head " + std::to_string(i) +
                                    " does not end");
        }
        if (Status s = alloc.MarkReachable(next); !s.ok()) {
          return Status::Corruption("smartht: chain of head " + std::to_string(i) + ": " +
                                    std::string(s.message()));
        }
        chained++;
      }
      b_off = next;
    }
  }

  log_ = bits;
  heads_off_ = off;
  heads_ = At(off);
  log_seen_.store(bits, std::memory_order_release);
  // 256 heads per stripe (the paper) on large tables, at most 2^16 stripes, at least
  // min(heads, 64) so small tables still run writers in parallel.
  stripe_bits_ = bits <= 6 ? bits : bits <= 14 ? 6 : std::min<uint32_t>(16, bits - 8);
  stripes_ = HugeArray<Stripe>(size_t{1} << stripe_bits_);
  if (!stripes_) return Status::OutOfMemory("smartht: lock stripes");
  chained_.store(chained, std::memory_order_relaxed);
  size_.Reset(static_cast<int64_t>(live));

  const uint64_t saved = pool_->root(1);
  filter_loaded_ = !pool_->created() && pool_->was_clean() && saved != 0 &&
                   LoadSavedFilter(saved, live);
  if (saved != 0) pool_->SetRoot(1, 0);  // I7: durable before any write of this open
  if (!filter_loaded_) {
    filter_capacity_.store(FilterKeysFor(bits, live));
    filter_ = std::make_unique<BloomFilter>(
        BloomFilter::BlocksFor(filter_capacity_.load(), params_.filter_bits_per_key));
    if (!*filter_) return Status::OutOfMemory("smartht: Bloom filter");
    stale_.store(0);
    filter_keys_.store(0);
  }
  const bool complete = filter_loaded_ || live == 0;
  complete_.store(complete, std::memory_order_release);
  if (!complete) {
    rebuild_pending_.store(true);
    PMHASH_RETURN_IF_ERROR(background_.Schedule([this] { return RebuildFilterTask(); }));
  }
  return background_.Start();
}

template <pm::PersistPolicy P>
bool SmartHt<P>::LoadSavedFilter(uint64_t off, uint64_t live) {
  const pm::ChunkAllocator& alloc = pool_->allocator();
  if (!alloc.ValidChunk(off, 1)) return false;
  const auto* hdr = pool_->template At<SavedFilterHeader>(off);
  const uint64_t blocks = hdr->blocks;
  if (hdr->magic != kSavedFilterMagic || hdr->head_bits != log_ || hdr->keys != live ||
      blocks == 0 || blocks >= alloc.chunk_count() ||
      !alloc.ValidChunk(off, static_cast<uint32_t>(blocks + 1))) {
    return false;
  }
  const char* data = pool_->base() + off + sizeof(SavedFilterHeader);
  SavedFilterHeader h = *hdr;
  h.checksum = 0;
  const uint64_t sum = XXH3_64bits_withSeed(data, blocks * 64, XXH3_64bits(&h, sizeof(h)));
  if (sum != hdr->checksum) return false;
  auto f = std::make_unique<BloomFilter>(blocks);
  if (!*f) return false;
  const auto* words = reinterpret_cast<const uint64_t*>(data);
  for (uint64_t i = 0; i < blocks * 8; i++) f->SetWord(i, words[i]);
  filter_ = std::move(f);
  filter_capacity_.store(blocks * BloomFilter::kBlockBits / params_.filter_bits_per_key);
  stale_.store(static_cast<int64_t>(hdr->stale));
  filter_keys_.store(live + hdr->stale);
  return true;
}

// Close: the filter (complete: the background work has been drained) into fresh chunks, then
// root 1 names it; the clean mark follows (Lifecycle). Out of space only skips the save.
template <pm::PersistPolicy P>
Status SmartHt<P>::SaveFilter() {
  if (!P::kPersistent || !filter_ || !complete_.load() || Size() < params_.save_filter_min_keys) {
    return Status::OK();
  }
  const uint64_t blocks = filter_->blocks();
  if (blocks + 1 > UINT32_MAX) return Status::OK();
  auto off = pool_->allocator().Allocate(static_cast<uint32_t>(blocks + 1));
  if (!off.ok()) return Status::OK();  // the next open rebuilds the filter
  char* dst = pool_->base() + off.value();
  SavedFilterHeader h{};
  h.magic = kSavedFilterMagic;
  h.head_bits = log_;
  h.blocks = blocks;
  h.keys = Size();
  h.stale = static_cast<uint64_t>(std::max<int64_t>(0, stale_.load()));
  h.checksum = 0;
  uint64_t buf[64];
  XXH3_state_t* st = XXH3_createState();
  if (!st) return Status::OK();
  XXH3_64bits_reset_withSeed(st, XXH3_64bits(&h, sizeof(h)));
  for (uint64_t i = 0; i < blocks * 8; i += 64) {
    const uint64_t m = std::min<uint64_t>(64, blocks * 8 - i);
    for (uint64_t w = 0; w < m; w++) buf[w] = filter_->Word(i + w);
    XXH3_64bits_update(st, buf, m * 8);
    persist_.NtCopy(dst + 64 + i * 8, buf, m * 8);
  }
  h.checksum = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  persist_.NtCopy(dst, &h, sizeof(h));
  persist_.Fence();
  pool_->SetRoot(1, off.value());
  return Status::OK();
}

template <pm::PersistPolicy P>
Status SmartHt<P>::Quiesce() {
  PMHASH_RETURN_IF_ERROR(background_.Shutdown());
  return SaveFilter();
}

template <pm::PersistPolicy P>
bool SmartHt<P>::Search(const PmBucket* head, Key k, uint8_t t, PmBucket** bucket,
                        int* slot) const {
  for (const PmBucket* b = head;;) {
    for (int j = 0; j < kSlots; j++) {
      if (b->tokens[j].load(std::memory_order_acquire) == t &&
          b->slots[j].key.load(std::memory_order_relaxed) == k) {
        *bucket = const_cast<PmBucket*>(b);
        *slot = j;
        return true;
      }
    }
    const uint64_t next = b->next.load(std::memory_order_acquire);
    if (next == 0) return false;
    b = At(next);
  }
}

template <pm::PersistPolicy P>
Status SmartHt<P>::Find(Key k, Value* v) const {
  const uint64_t h = hash_(k);
  RwSpinLock& l = StripeLockFor(h);
  l.lock_shared();
  if (complete_.load(std::memory_order_acquire) && !filter_->MayContain(h)) {
    l.unlock_shared();
    return Status::NotFound();  // the paper's point: no PM access
  }
  PmBucket* b;
  int j;
  const bool found = Search(&heads_[HeadIndex(h)], k, Token(h), &b, &j);
  if (found) *v = b->slots[j].value.load(std::memory_order_relaxed);
  l.unlock_shared();
  if (!found) {
    false_positives_.Add(1);
    return Status::NotFound();
  }
  return Status::OK();
}

template <pm::PersistPolicy P>
Status SmartHt<P>::Write(Key k, Value v, WriteMode mode) {
  if (life_.closed()) [[unlikely]] return index::Lifecycle::ClosedError(kKindName);
  const uint64_t h = hash_(k);
  const uint8_t t = Token(h);
  RwSpinLock& l = StripeLockFor(h);
  l.lock();
  PmBucket* head = &heads_[HeadIndex(h)];
  // Every write reads the head bucket (a search, or a free slot) and the filter block: start the
  // bucket's miss before the filter's, so that the two overlap.
  __builtin_prefetch(head, 1);
  PmBucket* b = nullptr;
  int j = -1;
  const bool maybe = !complete_.load(std::memory_order_acquire) || filter_->MayContain(h);
  if (maybe && Search(head, k, t, &b, &j)) {
    if (mode == WriteMode::kInsert) {
      l.unlock();
      return Status::Exists();
    }
    b->slots[j].value.store(v, std::memory_order_release);  // I4
    persist_.Persist(&b->slots[j].value, sizeof(Value));
    l.unlock();
    return Status::OK();
  }
  if (mode == WriteMode::kUpdate) {
    l.unlock();
    return Status::NotFound();
  }
  // A free slot of the head or of its first chained bucket (Algorithm 1, line 7).
  b = head;
  j = FreeSlot(head);
  if (j < 0) {
    if (const uint64_t next = head->next.load(std::memory_order_relaxed); next != 0) {
      b = At(next);
      j = FreeSlot(b);
    }
  }
  std::optional<Result<uint64_t>> fresh;
  if (j < 0) {
    fresh = pool_->allocator().Allocate(1);
    if (!fresh->ok()) {
      // Out of space: any free slot further down the chain (erased keys leave them).
      for (PmBucket* c = head;;) {
        if ((j = FreeSlot(c)) >= 0) {
          b = c;
          break;
        }
        const uint64_t next = c->next.load(std::memory_order_relaxed);
        if (next == 0) break;
        c = At(next);
      }
      if (j < 0) {
        l.unlock();
        return fresh->status();
      }
    }
  }
  if (j >= 0) {
    PmSlot& s = b->slots[j];
    s.key.store(k, std::memory_order_relaxed);  // I2: the pair, then its token, one line
    s.value.store(v, std::memory_order_relaxed);
    if (params_.tear_safe) persist_.Persist(&s, sizeof(PmSlot));
    b->tokens[j].store(t, std::memory_order_release);
    persist_.Persist(b, sizeof(PmBucket));
  } else {
    // Head insertion of a new bucket (Algorithm 1, lines 16-29; I3).
    const uint64_t off = fresh->value();
    alignas(64) PmBucket img;
    std::memset(static_cast<void*>(&img), 0, sizeof(img));
    img.tokens[0].store(t, std::memory_order_relaxed);
    img.slots[0].key.store(k, std::memory_order_relaxed);
    img.slots[0].value.store(v, std::memory_order_relaxed);
    img.next.store(head->next.load(std::memory_order_relaxed), std::memory_order_relaxed);
    persist_.NtCopy(At(off), &img, sizeof(img));
    persist_.Fence();
    head->next.store(off, std::memory_order_release);  // the commit point
    persist_.Persist(&head->next, sizeof(uint64_t));
    chained_.fetch_add(1, std::memory_order_relaxed);
    links_.fetch_add(1, std::memory_order_relaxed);
  }
  AddToFilters(h);
  l.unlock();
  size_.Add(1);
  // The growth check sums the size counter: done when a chain grew, and on one insert in 64
  // otherwise (by hash bits), not on every insert.
  if (j < 0 || ((h >> 8) & 63) == 0) MaybeGrow();
  return Status::OK();
}

template <pm::PersistPolicy P>
Status SmartHt<P>::Erase(Key k) {
  if (life_.closed()) [[unlikely]] return index::Lifecycle::ClosedError(kKindName);
  const uint64_t h = hash_(k);
  RwSpinLock& l = StripeLockFor(h);
  l.lock();
  if (complete_.load(std::memory_order_acquire) && !filter_->MayContain(h)) {
    l.unlock();
    return Status::NotFound();
  }
  PmBucket* b;
  int j;
  if (!Search(&heads_[HeadIndex(h)], k, Token(h), &b, &j)) {
    l.unlock();
    return Status::NotFound();
  }
  b->tokens[j].store(0, std::memory_order_release);  // I4: lazy deletion
  persist_.Persist(&b->tokens[j], 1);
  stale_.fetch_add(1, std::memory_order_relaxed);
  l.unlock();
  size_.Add(-1);
  MaybeScheduleRebuild();
  return Status::OK();
}

template <pm::PersistPolicy P>
void SmartHt<P>::MaybeScheduleRebuild() {
  const int64_t stale = stale_.load(std::memory_order_relaxed);
  // Against the filter's capacity, not the live keys: a table being emptied rebuilds its
  // filter a few times, not once per quarter of what is left.
  const double capacity = static_cast<double>(filter_capacity_.load(std::memory_order_relaxed));
  if (stale < 4 || static_cast<double>(stale) <= params_.rebuild_erased_ratio * capacity) return;
  if (rebuild_pending_.exchange(true)) return;
  if (!background_.Schedule([this] { return RebuildFilterTask(); }).ok()) {
    rebuild_pending_.store(false);
  }
}

// A new filter filled from PM while the live one serves (writers add to both), then swapped in
// with every stripe locked. Persists nothing.
template <pm::PersistPolicy P>
Status SmartHt<P>::RebuildFilterTask() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  LockGuard<Mutex> g(resize_mu_);
  const uint64_t capacity = FilterKeysFor(log_seen_.load(std::memory_order_acquire), Size());
  auto nf = std::make_unique<BloomFilter>(
      BloomFilter::BlocksFor(capacity, params_.filter_bits_per_key));
  if (!*nf) return Status::OutOfMemory("smartht: Bloom filter rebuild");
  filter_keys_.store(0);
  building_.store(nf.get(), std::memory_order_release);
  uint64_t added = 0;
  for (size_t s = 0; s < stripes_.size(); s++) {
    stripes_[s].lock.lock_shared();
    size_t first, last;
    StripeHeads(s, &first, &last);
    for (size_t i = first; i < last; i++) {
      for (const PmBucket* b = &heads_[i];;) {
        for (int j = 0; j < kSlots; j++) {
          if (b->tokens[j].load(std::memory_order_relaxed) != 0) {
            nf->Add(hash_(b->slots[j].key.load(std::memory_order_relaxed)));
            added++;
          }
        }
        const uint64_t next = b->next.load(std::memory_order_relaxed);
        if (next == 0) break;
        b = At(next);
      }
    }
    stripes_[s].lock.unlock_shared();
  }
  LockAll();
  filter_ = std::move(nf);
  filter_capacity_.store(capacity, std::memory_order_relaxed);
  building_.store(nullptr, std::memory_order_relaxed);
  stale_.store(0, std::memory_order_relaxed);
  filter_keys_.fetch_add(added, std::memory_order_relaxed);
  complete_.store(true, std::memory_order_release);
  UnlockAll();
  rebuild_pending_.store(false);  // (erases during the walk are forgotten with stale_)
  rebuilds_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

template <pm::PersistPolicy P>
void SmartHt<P>::MaybeGrow() {
  const uint32_t bits = log_seen_.load(std::memory_order_acquire);
  const uint64_t size = Size();
  const bool can_grow = params_.grow_keys_per_head > 0 && bits < params_.max_head_bits &&
                        size > no_grow_below_.load(std::memory_order_relaxed);
  if (can_grow && static_cast<double>(size) >
                      params_.grow_keys_per_head * static_cast<double>(uint64_t{1} << bits)) {
    if (Status s = Grow(bits); !s.ok()) {
      // Out of space (or memory): the table keeps working with longer chains; retry once it
      // has grown by half again.
      grow_failures_.fetch_add(1, std::memory_order_relaxed);
      no_grow_below_.store(size + size / 2, std::memory_order_relaxed);
    }
    return;
  }
  // A table that does not grow (growth off, at max_head_bits, or out of space) still keeps its
  // filter's false-positive rate: past twice its capacity the filter is rebuilt larger.
  if (size > 2 * filter_capacity_.load(std::memory_order_relaxed) &&
      !rebuild_pending_.exchange(true)) {
    if (!background_.Schedule([this] { return RebuildFilterTask(); }).ok()) {
      rebuild_pending_.store(false);
    }
  }
}

// Stop-the-world, crash-atomic doubling (I5): the new table in fresh chunks, persisted, then
// root 0 switches with one 8-byte store; the old chunks are freed after.
template <pm::PersistPolicy P>
Status SmartHt<P>::Grow(uint32_t seen) PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  if (!resize_mu_.try_lock()) return Status::OK();  // a rebuild or another growth runs
  LockAll();
  const Status s = log_ == seen ? GrowLocked() : Status::OK();
  UnlockAll();
  resize_mu_.unlock();
  return s;
}

// REQUIRES: resize_mu_ and every stripe held.
template <pm::PersistPolicy P>
Status SmartHt<P>::GrowLocked() PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  const auto started = ResizeLog::Now();
  pm::ChunkAllocator& alloc = pool_->allocator();
  const uint32_t nbits = log_ + 1;
  const uint64_t n = uint64_t{1} << log_;
  auto arr = alloc.Allocate(static_cast<uint32_t>(2 * n));
  if (!arr.ok()) return arr.status();
  const uint64_t capacity = FilterKeysFor(nbits, Size());
  auto nf = std::make_unique<BloomFilter>(
      BloomFilter::BlocksFor(capacity, params_.filter_bits_per_key));
  if (!*nf) {
    alloc.Free(arr.value(), static_cast<uint32_t>(2 * n));
    return Status::OutOfMemory("smartht: Bloom filter for growth");
  }
  std::vector<uint64_t> fresh;  // new chained buckets (freed again on failure)
  std::vector<uint64_t> old;    // old chained buckets (freed on success)
  uint64_t keys = 0;
  struct Pair {
    Key k;
    Value v;
    uint8_t t;
  };
  std::vector<Pair> half[2];
  // Writes the chain of new head `idx` holding `pairs`: the head, then chained buckets.
  auto write_chain = [&](uint64_t idx, const std::vector<Pair>& pairs) -> Status {
    uint64_t next = 0;
    const size_t nb = pairs.empty() ? 1 : (pairs.size() + kSlots - 1) / kSlots;
    // Back to front so that each bucket knows its successor; bucket 0 is the head.
    for (size_t bi = nb; bi-- > 0;) {
      alignas(64) PmBucket img;
      std::memset(static_cast<void*>(&img), 0, sizeof(img));
      for (int j = 0; j < kSlots && bi * kSlots + j < pairs.size(); j++) {
        const Pair& p = pairs[bi * kSlots + j];
        img.tokens[j].store(p.t, std::memory_order_relaxed);
        img.slots[j].key.store(p.k, std::memory_order_relaxed);
        img.slots[j].value.store(p.v, std::memory_order_relaxed);
      }
      img.next.store(next, std::memory_order_relaxed);
      uint64_t dst;
      if (bi == 0) {
        dst = arr.value() + idx * sizeof(PmBucket);
      } else {
        auto c = alloc.Allocate(1);
        if (!c.ok()) return c.status();
        fresh.push_back(c.value());
        dst = c.value();
      }
      persist_.NtCopy(At(dst), &img, sizeof(img));
      next = dst;
    }
    return Status::OK();
  };
  Status st;
  for (uint64_t i = 0; i < n && st.ok(); i++) {
    half[0].clear();
    half[1].clear();
    for (const PmBucket* b = &heads_[i];;) {
      for (int j = 0; j < kSlots; j++) {
        const uint8_t t = b->tokens[j].load(std::memory_order_relaxed);
        if (t == 0) continue;
        const Key k = b->slots[j].key.load(std::memory_order_relaxed);
        const uint64_t h = hash_(k);
        half[(h >> (63 - log_)) & 1].push_back({k, b->slots[j].value.load(std::memory_order_relaxed), t});
        nf->Add(h);
        keys++;
      }
      const uint64_t next = b->next.load(std::memory_order_relaxed);
      if (next == 0) break;
      old.push_back(next);
      b = At(next);
    }
    st = write_chain(2 * i, half[0]);
    if (st.ok()) st = write_chain(2 * i + 1, half[1]);
  }
  if (!st.ok()) {
    for (const uint64_t c : fresh) alloc.Free(c);
    alloc.Free(arr.value(), static_cast<uint32_t>(2 * n));
    return st;
  }
  persist_.Fence();
  pool_->SetRoot(0, PackRoot(nbits, arr.value()));  // the commit point (persisted)
  alloc.Free(heads_off_, static_cast<uint32_t>(n));
  for (const uint64_t c : old) alloc.Free(c);
  log_ = nbits;
  heads_off_ = arr.value();
  heads_ = At(arr.value());
  log_seen_.store(nbits, std::memory_order_release);
  chained_.store(fresh.size(), std::memory_order_relaxed);
  // The new filter holds every live key: complete, whatever the old one was.
  filter_ = std::move(nf);
  filter_capacity_.store(capacity, std::memory_order_relaxed);
  stale_.store(0, std::memory_order_relaxed);
  filter_keys_.store(keys, std::memory_order_relaxed);
  complete_.store(true, std::memory_order_release);
  doublings_.fetch_add(1, std::memory_order_relaxed);
  splits_.fetch_add(1, std::memory_order_relaxed);
  resize_log_.Record(started);
  return Status::OK();
}

template <pm::PersistPolicy P>
Status SmartHt<P>::ForEach(const std::function<void(Key, Value)>& fn) const
    PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  // Growth is held off for the whole walk (resize_mu_), so a key present throughout is visited
  // exactly once; pairs are handed out one stripe at a time, outside the stripe's lock (fn may
  // call the index; a growth it triggers is skipped: Grow only try-locks resize_mu_).
  auto& mu = const_cast<Mutex&>(resize_mu_);
  mu.lock();
  std::vector<std::pair<Key, Value>> pairs;
  for (size_t s = 0; s < stripes_.size(); s++) {
    pairs.clear();
    stripes_[s].lock.lock_shared();
    size_t first, last;
    StripeHeads(s, &first, &last);
    for (size_t i = first; i < last; i++) {
      for (const PmBucket* b = &heads_[i];;) {
        for (int j = 0; j < kSlots; j++) {
          if (b->tokens[j].load(std::memory_order_relaxed) != 0) {
            pairs.emplace_back(b->slots[j].key.load(std::memory_order_relaxed),
                               b->slots[j].value.load(std::memory_order_relaxed));
          }
        }
        const uint64_t next = b->next.load(std::memory_order_relaxed);
        if (next == 0) break;
        b = At(next);
      }
    }
    stripes_[s].lock.unlock_shared();
    for (const auto& [k, v] : pairs) fn(k, v);
  }
  mu.unlock();
  return Status::OK();
}

template <pm::PersistPolicy P>
IndexStats SmartHt<P>::Stats() const PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  IndexStats s;
  this->FillCommonStats(&s);
  // Chain lengths (buckets per head, 1 = the head alone), one stripe at a time.
  uint64_t heads = 0, buckets = 0, max_chain = 0, filter_bytes = 0, filter_blocks = 0;
  auto& mu = const_cast<Mutex&>(resize_mu_);
  mu.lock();
  for (size_t st = 0; st < stripes_.size(); st++) {
    stripes_[st].lock.lock_shared();
    size_t first, last;
    StripeHeads(st, &first, &last);
    for (size_t i = first; i < last; i++) {
      uint64_t len = 1;
      for (uint64_t next = heads_[i].next.load(std::memory_order_relaxed); next != 0; len++) {
        next = At(next)->next.load(std::memory_order_relaxed);
      }
      heads++;
      buckets += len;
      max_chain = std::max(max_chain, len);
    }
    if (st == 0) {
      filter_bytes = filter_->bytes();
      filter_blocks = filter_->blocks();
    }
    stripes_[st].lock.unlock_shared();
  }
  mu.unlock();
  s.buckets = buckets;
  s.capacity_slots = buckets * kSlots;
  s.load_factor = s.capacity_slots ? static_cast<double>(s.size) / s.capacity_slots : 0;
  s.pm_bytes = buckets * sizeof(PmBucket) + pm::kHeaderBytes;
  s.dram_bytes = filter_bytes + stripes_.bytes() + pool_->allocator().dram_bytes();
  s.global_depth = log_seen_.load();
  auto add = [&](const char* name, double value) { s.details.push_back({name, value}); };
  add("smartht.heads", static_cast<double>(heads));
  add("smartht.chained_buckets", static_cast<double>(buckets - heads));
  add("smartht.chain.mean", heads ? static_cast<double>(buckets) / heads : 0);
  add("smartht.chain.max", static_cast<double>(max_chain));
  add("smartht.chain.links", static_cast<double>(links_.load()));
  add("smartht.stripes", static_cast<double>(stripes_.size()));
  add("smartht.filter.blocks", static_cast<double>(filter_blocks));
  add("smartht.filter.bits_per_key",
      s.size ? static_cast<double>(filter_blocks * 512) / static_cast<double>(s.size) : 0);
  add("smartht.filter.complete", complete_.load() ? 1 : 0);
  add("smartht.filter.loaded", filter_loaded_ ? 1 : 0);
  add("smartht.filter.rebuilds", static_cast<double>(rebuilds_.load()));
  add("smartht.filter.stale", static_cast<double>(std::max<int64_t>(0, stale_.load())));
  add("smartht.filter.false_positives", static_cast<double>(false_positives_.Sum()));
  add("smartht.grow_failures", static_cast<double>(grow_failures_.load()));
  add("alloc.reused", static_cast<double>(pool_->allocator().reused_allocations()));
  background_.stats().AppendTo(&s.details, "smartht.bg");
  return s;
}

// REQUIRES: no concurrent writers.
template <pm::PersistPolicy P>
Status SmartHt<P>::CheckInvariants() const PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  auto fail = [](const std::string& what) {
    return Status::Corruption("smartht invariant: " + what);
  };
  auto& mu = const_cast<Mutex&>(resize_mu_);
  LockGuard<Mutex> g(mu);
  const pm::ChunkAllocator& alloc = pool_->allocator();
  if (pool_->root(0) != PackRoot(log_, heads_off_)) return fail("root 0 does not name the table");
  if (stripe_bits_ > log_) return fail("more stripes than heads");
  const uint64_t n = uint64_t{1} << log_;
  const bool complete = complete_.load();
  std::unordered_set<Key> keys;
  uint64_t chained = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t steps = 0;
    for (uint64_t off = heads_off_ + i * sizeof(PmBucket); off != 0; steps++) {
      if (steps > alloc.chunk_count()) return fail("chain of head " + std::to_string(i) + " cycles");
      if (!alloc.IsUsed(off)) return fail("bucket not marked allocated: " + std::to_string(off));
      if (steps > 0) chained++;
      const PmBucket* b = At(off);
      for (int j = 0; j < kSlots; j++) {
        const uint8_t t = b->tokens[j].load(std::memory_order_relaxed);
        if (t == 0) continue;
        const Key k = b->slots[j].key.load(std::memory_order_relaxed);
        const uint64_t h = hash_(k);
        if (t != Token(h)) return fail("token does not match key " + std::to_string(k));
        if (HeadIndex(h) != i) return fail("key " + std::to_string(k) + " in the wrong chain");
        if (!keys.insert(k).second) return fail("duplicate key " + std::to_string(k));
        if (complete && !filter_->MayContain(h)) {
          return fail("filter false negative for key " + std::to_string(k));
        }
      }
      off = b->next.load(std::memory_order_relaxed);
    }
  }
  if (chained != chained_.load()) return fail("chained bucket count");
  uint64_t saved = 0;
  if (const uint64_t r1 = pool_->root(1); r1 != 0) {
    saved = 1 + pool_->template At<SavedFilterHeader>(r1)->blocks;
  }
  // Heads, chained buckets and the saved filter.
  if (std::string e = this->CheckAccounting(n + chained + saved, keys.size()); !e.empty()) {
    return fail(e);
  }
  return Status::OK();
}

// Instantiated once, in the library (smartht.cc).
PMHASH_ENGINE_INSTANTIATIONS(extern, SmartHt);

}  // namespace pmhash::smartht
