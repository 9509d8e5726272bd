// src/index/pea/pea_recovery.h — Pea Hash, open, create and recovery (paper 3.4): the directory chosen, every offset validated, interrupted two-step updates repaired, DRAM state rebuilt.
//
// Part of the Pea engine (src/index/pea/pea.h: the paper, the design summary, the layout and
// the crash invariants I1..I7 that this code keeps); pea.h includes it at its end.
#pragma once

#include "index/pea/pea.h"

namespace pmhash::pea {

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::Create() {
  pm::ChunkAllocator& alloc = pool_->allocator();
  const uint32_t g = params_.initial_depth;
  const uint64_t n = uint64_t{1} << g;
  // StashSid array, directory region, segments (and, for a pure-stash sequence, their stash
  // segments), all written with NtCopy and fenced once before the roots name them.
  std::vector<uint64_t> stash_words(StashArrayWords(), 0);
  const uint64_t stash_bytes = stash_words.size() * 8;
  auto soff = alloc.Allocate(ChunksFor(stash_bytes));
  if (!soff.ok()) return soff.status();
  auto doff = alloc.Allocate(ChunksFor(n * 8));
  if (!doff.ok()) return doff.status();
  std::vector<uint64_t> entries(n);
  std::unique_ptr<BucketImage[]> img(new BucketImage[params_.segment_buckets]);
  std::memset(static_cast<void*>(img.get()), 0, seg_bytes_);
  for (uint32_t b = 0; b < params_.segment_buckets; b++) img[b].hdr[0] = kKvFormat;
  for (uint64_t i = 0; i < n; i++) {
    auto off = alloc.Allocate(1);
    if (!off.ok()) return off.status();
    persist_.NtCopy(pool_->template At<char>(off.value()), img.get(), seg_bytes_);
    const uint64_t sid = SidOf(off.value());
    entries[i] = PackEntry(sid, g, first_strategy_);
    uint64_t& w = stash_words[sid / (params_.segment_buckets / 2)];
    if (first_strategy_ == kStash && w == 0) {
      auto st = alloc.Allocate(1);  // empty stash segment: every stash bucket starts cleared
      if (!st.ok()) return st.status();
      persist_.NtCopy(pool_->template At<char>(st.value()), img.get(), seg_bytes_);
      w = SidOf(st.value()) + 1;
    }
  }
  persist_.NtCopy(pool_->template At<char>(soff.value()), stash_words.data(), stash_bytes);
  persist_.NtCopy(pool_->template At<char>(doff.value()), entries.data(), n * 8);
  persist_.Fence();
  if constexpr (M) PMHASH_RETURN_IF_ERROR(CreateMulti());
  pool_->SetRoot(2, soff.value());
  pool_->SetRoot(0, PackDesc(g, doff.value()));
  return pool_->CommitCreate();
}

// Recover and LoadState (paper 3.4): the directory (the valid descriptor with the larger global
// depth, I7), the StashSid array and the stash segments it names, and every segment of the
// directory, each checked (depths, strategies, I3 tiling, offsets in the heap) and given to
// name(offset, chunks), which takes the range or refuses it (a non-OK Status refuses the pool;
// the walk's MarkReachable also refuses a range taken twice). A stride whose entries differ from
// its lowest one (an interrupted split or transition, I5) is repaired when `repair` (the walk);
// the load refuses it (a clean Close leaves none). Then the DRAM state: lock table, directory,
// counts (Size() unknown).
template <pm::PersistPolicy P, bool R, bool M>
template <class Name>
Status Pea<P, R, M>::LoadDirectory(Name&& name, bool repair) {
  const pm::ChunkAllocator& alloc = pool_->allocator();

  // The directory: the valid descriptor with the larger global depth.
  uint64_t desc[2] = {pool_->root(0), pool_->root(1)};
  int pick = -1;
  for (int r = 0; r < 2; r++) {
    if (desc[r] == 0) continue;
    if (pick < 0 || DescDepth(desc[r]) > DescDepth(desc[pick])) {
      pick = r;
    } else if (DescDepth(desc[r]) == DescDepth(desc[pick])) {
      return Status::Corruption("pea: both directory descriptors claim global depth " +
                                std::to_string(DescDepth(desc[r])));
    }
  }
  if (pick < 0) return Status::Corruption("pea: pool has no directory (roots 0 and 1 are empty)");
  const uint32_t g = DescDepth(desc[pick]);
  const uint64_t doff = DescOffset(desc[pick]);
  if (g > params_.max_depth) {
    return Status::Corruption("pea: directory depth " + std::to_string(g) + " exceeds max_depth");
  }
  const uint64_t n = uint64_t{1} << g;
  const uint32_t dchunks = ChunksFor(n * 8);
  if (!alloc.ValidChunk(doff, dchunks)) {
    return Status::Corruption("pea: directory region at offset " + std::to_string(doff) + " (2^" +
                              std::to_string(g) + " entries) is not in the heap");
  }
  if (Status s = name(doff, dchunks); !s.ok()) {
    return Status::Corruption("pea: directory region: " + std::string(s.message()));
  }

  // The StashSid array and the stash segments it names.
  const uint64_t soff = pool_->root(2);
  const uint64_t swords = StashArrayWords();
  if (!alloc.ValidChunk(soff, ChunksFor(swords * 8))) {
    return Status::Corruption("pea: StashSid array offset " + std::to_string(soff) +
                              " is not in the heap");
  }
  if (Status s = name(soff, ChunksFor(swords * 8)); !s.ok()) {
    return Status::Corruption("pea: StashSid array: " + std::string(s.message()));
  }
  stash_sids_ = pool_->template At<std::atomic<uint64_t>>(soff);
  uint64_t nstash = 0;
  for (uint64_t w = 0; w < swords; w++) {
    const uint64_t x = stash_sids_[w].load(std::memory_order_relaxed);
    if (x == 0) continue;
    if (x - 1 >= chunk_count_) {
      return Status::Corruption("pea: StashSid[" + std::to_string(w) + "] names no segment");
    }
    if (Status s = name(OffsetOfSid(x - 1), 1); !s.ok()) {
      return Status::Corruption("pea: stash segment: " + std::string(s.message()));
    }
    nstash++;
  }

  // Strided scan of the directory (paper: copy the lowest element across its stride).
  auto* entries = pool_->template At<std::atomic<uint64_t>>(doff);
  bool repaired = false;
  for (uint64_t i = 0; i < n;) {
    const uint64_t e = entries[i].load(std::memory_order_relaxed);
    const uint32_t ld = EntryDepth(e);
    const uint32_t st = EntryStrategy(e);
    if (ld > g)
      return Status::Corruption("pea: directory entry " + std::to_string(i) +
                                " has local depth above the global depth");
    if (st < first_strategy_ || st > last_strategy_) {
      return Status::Corruption("pea: directory entry " + std::to_string(i) + " has strategy " +
                                std::to_string(st));
    }
    const uint64_t stride = uint64_t{1} << (g - ld);
    if (i % stride != 0) {
      return Status::Corruption("pea: segment depths do not tile the directory at entry " +
                                std::to_string(i));
    }
    const uint64_t sid = EntrySid(e);
    if (sid >= chunk_count_) {
      return Status::Corruption("pea: directory entry " + std::to_string(i) + " names segment " +
                                std::to_string(sid) + " outside the heap");
    }
    if (Status s = name(OffsetOfSid(sid), 1); !s.ok()) {
      return Status::Corruption("pea: segment of directory entry " + std::to_string(i) + ": " +
                                std::string(s.message()));
    }
    if (st == kStash && stash_sids_[sid / (params_.segment_buckets / 2)].load() == 0) {
      return Status::Corruption("pea: segment " + std::to_string(sid) +
                                " uses a stash that does not exist");
    }
    for (uint64_t x = i + 1; x < i + stride; x++) {
      if (entries[x].load(std::memory_order_relaxed) != e) {
        if (!repair) {
          return Status::Corruption("pea: directory entry " + std::to_string(x) +
                                    " differs from its stride's lowest");
        }
        entries[x].store(e, std::memory_order_relaxed);
        persist_.Flush(&entries[x], 8);
        repaired = true;
      }
    }
    i += stride;
  }
  if (repaired) persist_.Fence();

  // DRAM state.
  locks_ = HugeArray<SegLocks>(chunk_count_);
  if (!locks_) return Status::OutOfMemory("pea: lock table");
  // The mapping is zero-filled, but only a constructor begins an atomic's lifetime (as REH
  // constructs its directory entries in place).
  std::uninitialized_default_construct_n(locks_.data(), locks_.size());
  if constexpr (M) {
    // A new pool's segments are empty, so every key is in one bucket. After a reopen that is not
    // known (the flag is DRAM only): it stays 0 until a split rewrites the segment.
    if (pool_->created()) {
      for (uint64_t x = 0; x < locks_.size(); x++) {
        locks_[x].together.store(1, std::memory_order_relaxed);
      }
    }
  }
  auto dir = std::make_unique<Directory>();
  dir->depth = g;
  dir->root = pick;
  dir->offset = doff;
  dir->chunks = dchunks;
  dir->entries = entries;
  {
    LockGuard<RwSpinLock> gd(dir_lock_);
    dirs_.clear();
    dir_.store(dir.get(), std::memory_order_release);
    dirs_.push_back(std::move(dir));
  }
  stash_segments_.store(nstash);
  size_.Reset(0);
  size_base_.store(0);
  size_known_.store(pool_->created());
  return Status::OK();
}

// Recovery (paper 3.4): the directory and the segments marked reachable, interrupted two-step
// updates repaired, the DRAM state rebuilt (LoadDirectory); pea-kv and pea-multi then walk
// their records / value lists. Every value read is validated.
template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::Recover() {
  pm::ChunkAllocator& alloc = pool_->allocator();
  PMHASH_RETURN_IF_ERROR(LoadDirectory(
      [&alloc](uint64_t off, uint32_t n) { return alloc.MarkReachable(off, n); }, true));
  if constexpr (!R && !M) {
    // The count Close saved, if this open follows a clean shutdown (the design note, "Recovery
    // in ms"). One above the pool's byte size is hostile (and could overflow Size()'s sum): the
    // first Size() counts instead.
    const uint64_t saved = pool_->root(kSavedSizeRoot);
    if (!pool_->created() && pool_->was_clean() && saved != 0 && saved - 1 <= pool_->size()) {
      size_base_.store(static_cast<int64_t>(saved - 1));
      size_known_.store(true);
    }
  }
  if constexpr (R) return RecoverRecords();
  if constexpr (M) return RecoverMulti();
  return Status::OK();
}

// Close(), before the pool's clean mark (Lifecycle): plain pea saves its live count, for the
// next open. Epoch-retired chunks need no drain there: after a clean shutdown, as after a crash,
// its chunk allocator is rebuilt by reachability. pea-kv and pea-multi save an image instead
// (I14), so the allocator must then hold exactly what the structure names: retired segments,
// records and value nodes are freed, the retired directory regions too, and empty slabs
// released.
template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::Quiesce() {
  if constexpr (!R && !M && P::kPersistent) pool_->SetRoot(kSavedSizeRoot, Size() + 1);
  if constexpr (R || M) {
    epoch_.Drain();
    LockGuard<RwSpinLock> gd(dir_lock_);
    const Directory* d = dir_.load(std::memory_order_relaxed);
    for (const auto& x : dirs_) {
      if (x.get() != d) pool_->allocator().Free(x->offset, x->chunks);
    }
    std::erase_if(dirs_, [d](const auto& x) { return x.get() != d; });
    if constexpr (R) records_->ReleaseEmptySlabs();
    if constexpr (M) values_->ReleaseEmptySlabs();
  }
  return Status::OK();
}

// I14, the image of a clean Close: the live pairs, then the record heap's (pea-kv) or the value
// heap's (pea-multi) (record_heap.h, "Clean shutdown").
template <pm::PersistPolicy P, bool R, bool M>
void Pea<P, R, M>::SaveState(pm::StateWriter& w) const requires(R || M) {
  w.Put<uint64_t>(Size());
  if constexpr (R) records_->SaveState(w);
  if constexpr (M) values_->SaveState(w);
}

// I14: no bucket, record or value node is read. The directory is checked as Recover checks it
// (a stride to repair refuses the image), and the loaded allocator against it: the directory
// region, the StashSid array, the stash segments, the segments, the heap's slabs and (pea-multi)
// the redo logs inside the heap, each named once, in use, and the used chunks exactly those plus
// the heap's large records' chunks. pea-kv's live count must be the heap's records; pea-multi's
// is bounded by the pool's words, and every redo log must be empty (one to apply refuses it).
template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::LoadState(pm::StateReader& r) requires(R || M) {
  const pm::ChunkAllocator& alloc = pool_->allocator();
  const Status bad = Status::Corruption(std::string(kKindName) + ": saved state");
  uint64_t live = 0;
  if (!r.Get(&live)) return bad;
  pm::ChunkSet named(alloc);
  PMHASH_RETURN_IF_ERROR(LoadDirectory(
      [&](uint64_t off, uint32_t n) { return named.Add(off, n) ? Status::OK() : bad; }, false));
  auto name = [&named](uint64_t o, uint32_t n) { return named.Add(o, n); };
  uint64_t large = 0;  // chunks of the heap's records too large for a slab
  if constexpr (R) {
    if (!records_->LoadState(r, live, name)) return bad;
    large = records_->large_chunks();
  }
  if constexpr (M) {
    logs_offset_ = pool_->root(3);
    if (live > pool_->size() / 8 || !named.Add(logs_offset_, ChunksFor(kMultiLogBytes))) {
      return bad;
    }
    logs_ = pool_->template At<MultiLog>(logs_offset_);
    for (uint32_t x = 0; x < kMultiLogs; x++) {
      if (logs_[x].n.load(std::memory_order_relaxed) != 0) return bad;
    }
    free_logs_.store(~uint64_t{0});
    values_->Reset();
    if (!values_->LoadState(r, name)) return bad;
    large = values_->large_chunks();
  }
  if (r.remaining() != 0 || !named.AllocatorHasAll() ||
      alloc.used_chunks() != named.count() + large) {
    return bad;  // a leak, a chunk the bitmap lacks, or (pea-kv) records no slot names
  }
  size_base_.store(static_cast<int64_t>(live));
  size_known_.store(true);
  return Status::OK();
}

// pea-kv: the record heap rebuilt from the records the live slots name (I8), after everything
// else is marked in the chunk allocator. One pass over every bucket, so it also counts Size().
template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::RecoverRecords() {
  records_->Reset();
  Status st = Status::OK();
  uint64_t live = 0;
  // Records are checked in batches whose first lines are prefetched together: each is a random
  // miss, and one at a time they would make this walk latency-bound (3-5x slower at 1M keys).
  constexpr int kBatch = 16;
  std::pair<uint64_t, uint64_t> batch[kBatch];  // record offset, slot hash
  int n = 0;
  auto check_batch = [&] {
    for (int x = 0; x < n && st.ok(); x++) {
      st = records_->Recover(batch[x].first, batch[x].second, hash_);
    }
    n = 0;
  };
  ForEachSegment(dir_.load(std::memory_order_relaxed), [&](uint64_t, uint64_t e) {
    ForEachLiveSlot(e, [&](const PmSlot& sl) {
      const uint64_t off = sl.value.load(std::memory_order_relaxed);
      records_->Prefetch(off);
      batch[n++] = {off, sl.key.load(std::memory_order_relaxed)};
      live++;
      if (n == kBatch) check_batch();
    });
  });
  check_batch();
  PMHASH_RETURN_IF_ERROR(st);
  size_base_.store(static_cast<int64_t>(live));
  size_known_.store(true);
  return Status::OK();
}

}  // namespace pmhash::pea
