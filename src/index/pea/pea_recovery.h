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

// Recovery (paper 3.4): pick the directory, mark what is reachable, strided scan that repairs
// interrupted two-step updates, rebuild the DRAM lock table. Every value read is validated.
template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::Recover() {
  pm::ChunkAllocator& alloc = pool_->allocator();

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
  PMHASH_RETURN_IF_ERROR(alloc.MarkReachable(doff, dchunks));

  // The StashSid array and the stash segments it names.
  const uint64_t soff = pool_->root(2);
  const uint64_t swords = StashArrayWords();
  if (!alloc.ValidChunk(soff, ChunksFor(swords * 8))) {
    return Status::Corruption("pea: StashSid array offset " + std::to_string(soff) +
                              " is not in the heap");
  }
  if (Status s = alloc.MarkReachable(soff, ChunksFor(swords * 8)); !s.ok()) {
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
    if (Status s = alloc.MarkReachable(OffsetOfSid(x - 1)); !s.ok()) {
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
    if (Status s = alloc.MarkReachable(OffsetOfSid(sid)); !s.ok()) {
      return Status::Corruption("pea: segment of directory entry " + std::to_string(i) + ": " +
                                std::string(s.message()));
    }
    if (st == kStash && stash_sids_[sid / (params_.segment_buckets / 2)].load() == 0) {
      return Status::Corruption("pea: segment " + std::to_string(sid) +
                                " uses a stash that does not exist");
    }
    for (uint64_t x = i + 1; x < i + stride; x++) {
      if (entries[x].load(std::memory_order_relaxed) != e) {
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

// Close(), before the pool's clean mark (Lifecycle): plain pea's live count, for the next open.
// Epoch-retired chunks need no drain here: after a clean shutdown, as after a crash, the chunk
// allocator is rebuilt by reachability.
template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::Quiesce() {
  if constexpr (!R && !M && P::kPersistent) pool_->SetRoot(kSavedSizeRoot, Size() + 1);
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
