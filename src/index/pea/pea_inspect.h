// src/index/pea/pea_inspect.h — Pea Hash, walks over the whole table: ForEach, Size, per-key strategy and depth, Stats and CheckInvariants.
//
// Part of the Pea engine (src/index/pea/pea.h: the paper, the design summary, the layout and
// the crash invariants I1..I7 that this code keeps); pea.h includes it at its end.
#pragma once

#include "index/pea/pea.h"

namespace pmhash::pea {

template <pm::PersistPolicy P, bool R, bool M>
uint64_t Pea<P, R, M>::LockSegmentFor(uint64_t h) const {
  Backoff backoff;
  for (;;) {
    const Directory* d = dir_.load(std::memory_order_acquire);
    const uint64_t i = DirIndex(h, d->depth);
    const uint64_t e = d->entries[i].load(std::memory_order_acquire);
    SegLocks& L = locks_[EntrySid(e)];
    if (L.seg.TryLock()) {
      if (d->entries[i].load(std::memory_order_acquire) == e &&
          dir_.load(std::memory_order_acquire) == d) {
        for (int x = 0; x < kBucketLocks; x++) L.bucket[x].Lock();
        return e;
      }
      L.seg.UnlockUnchanged();
    }
    backoff.Pause();
  }
}

template <pm::PersistPolicy P, bool R, bool M>
template <class Take>
void Pea<P, R, M>::ForEachLiveSlot(uint64_t e, Take&& take) const {
  const uint64_t sid = EntrySid(e);
  auto bucket = [&](const PmBucket* b) {
    if constexpr (M) {
      // pea-multi: a pointer slot's pairs, as one slot each (REQUIRES: its bucket's lock).
      std::vector<Value> vals;
      for (int j = 0; j < PtrSlots(b->hdr[0].load(std::memory_order_relaxed)); j++) {
        vals.clear();
        ReadList(b->slots[j].value.load(std::memory_order_relaxed), &vals);
        PmSlot pair;
        pair.key.store(b->slots[j].key.load(std::memory_order_relaxed), std::memory_order_relaxed);
        for (Value v : vals) {
          pair.value.store(v, std::memory_order_relaxed);
          take(std::as_const(pair));
        }
      }
    }
    for (uint32_t m = Occupancy(b); m; m &= m - 1) take(b->slots[std::countr_zero(m)]);
  };
  for (uint32_t b = 0; b < params_.segment_buckets; b++) bucket(BucketAt(sid, b));
  if (EntryStrategy(e) == kStash) {
    bucket(StashBucket(sid, 0));
    bucket(StashBucket(sid, 1));
  }
}

template <pm::PersistPolicy P, bool R, bool M>
template <class Take, class Done>
void Pea<P, R, M>::WalkLiveSlots(Take&& take, Done&& segment_done) const {
  // Walk the hash space by segment ranges (as REH): splits only cut ranges, so a key present
  // for the whole walk is visited exactly once.
  for (uint64_t cursor = 0;;) {
    const uint64_t e = LockSegmentFor(cursor);
    SegLocks& L = locks_[EntrySid(e)];
    ForEachLiveSlot(e, take);
    for (int x = 0; x < kBucketLocks; x++) L.bucket[x].UnlockUnchanged();
    L.seg.UnlockUnchanged();
    segment_done();
    const uint32_t ld = EntryDepth(e);
    if (ld == 0) break;
    const uint32_t shift = 64 - ld;
    if ((cursor >> shift) == (~uint64_t{0} >> shift)) break;
    cursor = ((cursor >> shift) + 1) << shift;
  }
}

template <pm::PersistPolicy P, bool R, bool M>
template <class Fn>
void Pea<P, R, M>::ForEachSegment(const Directory* d, Fn&& fn) const {
  for (uint64_t i = 0; i < d->size();) {
    const uint64_t e = d->entries[i].load(std::memory_order_acquire);
    fn(i, e);
    i += uint64_t{1} << (d->depth - std::min(EntryDepth(e), d->depth));
  }
}

template <pm::PersistPolicy P, bool R, bool M>
uint64_t Pea<P, R, M>::CountLive() const {
  EpochManager::Guard guard(epoch_);
  uint64_t live = 0;
  ForEachSegment(dir_.load(std::memory_order_acquire), [&](uint64_t, uint64_t e) {
    const uint64_t sid = EntrySid(e);
    for (uint32_t b = 0; b < params_.segment_buckets; b++) {
      live += std::popcount(Occupancy(BucketAt(sid, b)));
    }
    if (EntryStrategy(e) == kStash) {
      live += std::popcount(Occupancy(StashBucket(sid, 0)));
      live += std::popcount(Occupancy(StashBucket(sid, 1)));
    }
  });
  return live;
}

template <pm::PersistPolicy P, bool R, bool M>
uint64_t Pea<P, R, M>::Size() const {
  if (!size_known_.load(std::memory_order_acquire)) {
    // After a crash: one scan of the bucket headers (see "paper is vague" in the header).
    LockGuard<SpinLock> g(size_mu_);
    if (!size_known_.load(std::memory_order_relaxed)) {
      const int64_t before = size_.Sum();
      size_base_.store(static_cast<int64_t>(CountLive()) - before, std::memory_order_relaxed);
      size_known_.store(true, std::memory_order_release);
    }
  }
  const int64_t s = size_.Sum() + size_base_.load(std::memory_order_relaxed);
  return s < 0 ? 0 : static_cast<uint64_t>(s);
}

template <pm::PersistPolicy P, bool R, bool M>
uint32_t Pea<P, R, M>::StrategyOf(Key k) const {
  const Directory* d = dir_.load(std::memory_order_acquire);
  return EntryStrategy(d->entries[DirIndex(hash_(k), d->depth)].load());
}

template <pm::PersistPolicy P, bool R, bool M>
uint32_t Pea<P, R, M>::LocalDepthOf(Key k) const {
  const Directory* d = dir_.load(std::memory_order_acquire);
  return EntryDepth(d->entries[DirIndex(hash_(k), d->depth)].load());
}

template <pm::PersistPolicy P, bool R, bool M>
IndexStats Pea<P, R, M>::Stats() const {
  IndexStats s;
  this->FillCommonStats(&s);
  const Directory* d = dir_.load(std::memory_order_acquire);
  uint64_t per[3] = {0, 0, 0};
  uint64_t stash_entries = 0;
  EpochManager::Guard guard(epoch_);  // the walk may read segments that a split retires
  ForEachSegment(d, [&](uint64_t, uint64_t e) {
    const uint32_t st = std::min<uint32_t>(EntryStrategy(e), 2);
    per[st]++;
    if (st == kStash) {
      stash_entries += std::popcount(Occupancy(StashBucket(EntrySid(e), 0)));
      stash_entries += std::popcount(Occupancy(StashBucket(EntrySid(e), 1)));
    }
  });
  const uint64_t segments = per[0] + per[1] + per[2];
  s.buckets = segments * params_.segment_buckets + per[2] * 2;
  s.capacity_slots = s.buckets * kSlots;
  s.load_factor = s.capacity_slots ? static_cast<double>(s.size) / s.capacity_slots : 0;
  s.pm_bytes = pool_->allocator().used_chunks() * seg_bytes_ + pm::kHeaderBytes;  // + records
  s.dram_bytes = locks_.bytes() + pool_->allocator().dram_bytes() +
                 (R ? records_->dram_bytes() : 0) + (M ? values_->dram_bytes() : 0);
  s.global_depth = d->depth;
  auto add = [&](const char* name, double v) { s.details.push_back({name, v}); };
  add("pea.segments", static_cast<double>(segments));
  add("pea.segments.single", static_cast<double>(per[0]));
  add("pea.segments.two_choice", static_cast<double>(per[1]));
  add("pea.segments.stash", static_cast<double>(per[2]));
  add("pea.transitions.two_choice", static_cast<double>(to_two_choice_.load()));
  add("pea.transitions.stash", static_cast<double>(to_stash_.load()));
  add("pea.stash.segments", static_cast<double>(stash_segments_.load()));
  add("pea.stash.entries", static_cast<double>(stash_entries));
  add("pea.segment_buckets", static_cast<double>(params_.segment_buckets));
  add("pea.directory.max_stride", static_cast<double>(max_stride_.load()));
  add("pea.splits.stash", static_cast<double>(stash_splits_.load()));
  add("pea.stash.stale_cleared", static_cast<double>(stale_stash_cleared_.load()));
  add("alloc.reused", static_cast<double>(pool_->allocator().reused_allocations()));
  if constexpr (R) records_->AddDetails(&s);
  if constexpr (M) {
    add("pea.multi.compactions", static_cast<double>(compactions_.load()));
    add("pea.multi.compactions_empty", static_cast<double>(compactions_empty_.load()));
    add("pea.multi.buffer_grows", static_cast<double>(buffer_grows_.load()));
    add("pea.multi.chain_nodes", static_cast<double>(chain_nodes_.load()));
    add("pea.multi.logged_commits", static_cast<double>(logged_commits_.load()));
    add("pea.multi.max_buffer_type", static_cast<double>(max_buffer_type_));
    add("pea.multi.value_bytes", static_cast<double>(values_->stats().bytes));
  }
  return s;
}

// REQUIRES: no concurrent writers.
template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::CheckInvariants() const {
  const index::InvariantFailure fail{kKindName};
  if constexpr (R || M) epoch_.Drain();  // retired records / value nodes are back in the heap
  const Directory* d = dir_.load(std::memory_order_acquire);
  const uint32_t g = d->depth;
  const pm::ChunkAllocator& alloc = pool_->allocator();
  index::LiveKeys keys(records_.get(), hash_);  // (records_: null unless R)
  std::unordered_set<uint64_t> sids;
  uint64_t live = 0;
  std::string err;
  auto check_bucket = [&](const PmBucket* b, uint64_t prefix, uint32_t ld, uint32_t st,
                          uint32_t bidx, uint64_t sid, bool stash) {
    const uint64_t w[2] = {b->hdr[0].load(), b->hdr[1].load()};
    if (w[0] != 0 && (w[0] & (M ? 0xFFFF : kKvFormat)) == 0)
      err = "bucket header without the key/value format bit";
    // pea-multi: the pointer slots, then the key/value slots, through the same checks.
    const int nptr = PtrSlots(w[0]);
    for (uint32_t m = KvOcc(w[0]) | ((1u << nptr) - 1); m && err.empty(); m &= m - 1) {
      const int j = std::countr_zero(m);
      const Key k = b->slots[j].key.load();
      const uint64_t h = SlotHash(k);
      if (ld > 0 && (h >> (64 - ld)) != prefix) {
        err = "key " + std::to_string(k) + " in segment " + std::to_string(sid) +
              " outside its hash range";
        break;
      }
      if (j < kFpSlots && GetFpByte(w, j) != Fp(h)) {
        err = "stale fingerprint for key " + std::to_string(k);
        break;
      }
      if (!stash) {
        const uint32_t b1 = Bucket1(h);
        const bool ok = bidx == b1 || (st >= kTwoChoice && bidx == Bucket2(h, b1));
        if (!ok) {
          err = "key " + std::to_string(k) + " in a bucket its strategy does not probe";
          break;
        }
      }
      if constexpr (M) {
        // Duplicate keys are the point; every value of a pointer slot counts.
        if (j < nptr) {
          uint64_t pairs = 0;
          if (err = CheckList(b->slots[j].value.load(), k, &pairs); !err.empty()) break;
          live += pairs;
        } else {
          live++;
        }
        continue;
      }
      if (err = keys.Add(k, b->slots[j].value.load(), h); !err.empty()) break;
      live++;
    }
  };
  // pea-multi: a segment flagged `together` (SegLocks) has each key's slots in one bucket.
  auto check_together = [&](uint64_t sid, uint32_t st) {
    std::unordered_map<Key, const PmBucket*> where;
    auto visit = [&](const PmBucket* b) {
      const uint64_t w0 = b->hdr[0].load();
      for (uint32_t m = KvOcc(w0) | ((1u << PtrSlots(w0)) - 1); m && err.empty(); m &= m - 1) {
        const Key k = b->slots[std::countr_zero(m)].key.load();
        const auto [it, fresh] = where.emplace(k, b);
        if (!fresh && it->second != b) {
          err = "key " + std::to_string(k) + " has slots in two buckets of segment " +
                std::to_string(sid) + ", which is flagged as keeping every key in one bucket";
        }
      }
    };
    for (uint32_t b = 0; b < params_.segment_buckets; b++) visit(BucketAt(sid, b));
    if (st == kStash) {
      visit(StashBucket(sid, 0));
      visit(StashBucket(sid, 1));
    }
  };
  uint64_t segments = 0;
  for (uint64_t i = 0; i < d->size() && err.empty();) {
    const uint64_t e = d->entries[i].load();
    const uint32_t ld = EntryDepth(e);
    const uint32_t st = EntryStrategy(e);
    if (ld > g) return fail("local depth above global depth");
    if (st < first_strategy_ || st > last_strategy_) return fail("strategy out of range");
    const uint64_t stride = uint64_t{1} << (g - ld);
    if (i % stride != 0) return fail("directory does not tile");
    for (uint64_t x = i; x < i + stride; x++) {
      if (d->entries[x].load() != e)
        return fail("directory stride not uniform at " + std::to_string(x));
    }
    const uint64_t sid = EntrySid(e);
    if (sid >= chunk_count_ || !alloc.IsUsed(OffsetOfSid(sid)))
      return fail("segment not allocated");
    if (!sids.insert(sid).second) return fail("segment referenced by two strides");
    const SegLocks& L = locks_[sid];
    if (L.seg.IsLocked()) return fail("segment lock held at rest");
    for (int x = 0; x < kBucketLocks; x++) {
      if (L.bucket[x].IsLocked()) return fail("bucket lock held at rest");
    }
    const uint64_t prefix = ld == 0 ? 0 : i >> (g - ld);
    for (uint32_t b = 0; b < params_.segment_buckets && err.empty(); b++) {
      check_bucket(BucketAt(sid, b), prefix, ld, st, b, sid, false);
    }
    if (st == kStash) {
      if (StashSidWord(sid).load() == 0) return fail("stash segment missing");
      check_bucket(StashBucket(sid, 0), prefix, ld, st, 0, sid, true);
      check_bucket(StashBucket(sid, 1), prefix, ld, st, 0, sid, true);
    }
    if constexpr (M) {
      if (err.empty() && L.together.load() != 0) check_together(sid, st);
    }
    segments++;
    i += stride;
  }
  if (!err.empty()) return fail(err);
  // Allocation: segments + stash segments + StashSid array + current and retired directories.
  uint64_t expect = segments + ChunksFor(StashArrayWords() * 8) + limbo_chunks_.load();
  for (uint64_t w = 0; w < StashArrayWords(); w++) expect += stash_sids_[w].load() != 0;
  {
    LockGuard<RwSpinLock> gd(const_cast<RwSpinLock&>(dir_lock_));
    for (const auto& x : dirs_) expect += x->chunks;
  }
  if (std::string e = keys.Finish(&expect); !e.empty()) return fail(e);
  if constexpr (M) {
    if (Status hs = values_->Check(); !hs.ok()) return fail(std::string(hs.message()));
    expect += values_->stats().chunks + ChunksFor(kMultiLogBytes);
    for (uint32_t x = 0; x < kMultiLogs; x++) {
      if (logs_[x].n.load() != 0) return fail("a redo log left committed at rest");
    }
  }
  if (std::string e = this->CheckAccounting(expect, live); !e.empty()) return fail(e);
  return Status::OK();
}

}  // namespace pmhash::pea
