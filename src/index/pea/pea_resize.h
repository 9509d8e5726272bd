// src/index/pea/pea_resize.h — Pea Hash, growth: strategy transitions, the 4-way segment split and directory expansion (paper 3.2), each with one commit point.
//
// Part of the Pea engine (src/index/pea/pea.h: the paper, the design summary, the layout and
// the crash invariants I1..I7 that this code keeps); pea.h includes it at its end.
#pragma once

#include "index/pea/pea.h"

namespace pmhash::pea {

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::SlowPath(uint64_t h, uint64_t e_seen,
                           const Directory* d_seen) PMHASH_NO_THREAD_SAFETY_ANALYSIS {
  dir_lock_.lock_shared();
  Directory* d = dir_.load(std::memory_order_acquire);
  const uint64_t i = DirIndex(h, d->depth);
  const uint64_t e = d->entries[i].load(std::memory_order_acquire);
  if (d != d_seen || e != e_seen) {
    dir_lock_.unlock_shared();
    return Status::OK();  // the segment changed meanwhile: retry the fast path
  }
  SegLocks& L = locks_[EntrySid(e)];
  if (!L.seg.TryLock()) {
    dir_lock_.unlock_shared();
    CpuRelax();
    return Status::OK();  // another thread is transitioning or splitting it
  }
  // Entries of a segment change only under its lock or the exclusive directory lock.
  if (d->entries[i].load(std::memory_order_acquire) != e) {
    L.seg.UnlockUnchanged();
    dir_lock_.unlock_shared();
    return Status::OK();
  }
  const uint32_t st = EntryStrategy(e);
  if (st < last_strategy_) {
    Status s = Transition(d, i, e, st + 1);
    L.seg.Unlock();
    dir_lock_.unlock_shared();
    return s;
  }
  const uint32_t ld = EntryDepth(e);
  uint32_t need = 0;
  Status s;
  if (ld + 2 > d->depth) {
    need = ld + 2;
    L.seg.UnlockUnchanged();
  } else {
    s = Split(d, i, e, &need);
  }
  dir_lock_.unlock_shared();
  if (!s.ok()) return s;
  if (need > 0) {
    if (need > params_.max_depth) {
      return Status::OutOfSpace("pea: directory at max_depth " + std::to_string(params_.max_depth) +
                                " and a segment of that depth is full");
    }
    return Expand(d, need);
  }
  return Status::OK();
}

template <pm::PersistPolicy P, bool R, bool M>
void Pea<P, R, M>::WriteStride(Directory* d, uint64_t first, uint64_t n,
                            const std::function<uint64_t(uint64_t)>& entry_of) {
  if (n > max_stride_.load(std::memory_order_relaxed)) {
    max_stride_.store(n, std::memory_order_relaxed);  // statistics only: races are harmless
  }
  for (uint64_t x = first + 1; x < first + n; x++) {
    d->entries[x].store(entry_of(x), std::memory_order_release);
  }
  if (n > 1) {
    persist_.Flush(&d->entries[first + 1], (n - 1) * 8);
    persist_.Fence();
  }
  d->entries[first].store(entry_of(first), std::memory_order_release);  // the commit
  persist_.Persist(&d->entries[first], 8);
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::EnsureStash(uint64_t sid) {
  std::atomic<uint64_t>& w = StashSidWord(sid);
  if (w.load(std::memory_order_acquire) != 0) return Status::OK();
  LockGuard<SpinLock> g(stash_mu_);
  if (w.load(std::memory_order_acquire) != 0) return Status::OK();
  auto off = pool_->allocator().Allocate(1);
  if (!off.ok()) return off.status();
  // Its buckets are cleared by each main segment as it turns to stash (I5).
  w.store(SidOf(off.value()) + 1, std::memory_order_release);
  persist_.Persist(&w, 8);
  stash_segments_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::Transition(Directory* d, uint64_t i, uint64_t e, uint32_t to) {
  const uint64_t sid = EntrySid(e);
  if (to == kStash) {
    PMHASH_RETURN_IF_ERROR(EnsureStash(sid));
    for (int s = 0; s < 2; s++) {
      PmBucket* sb = StashBucket(sid, s);
      const uint64_t h0 = sb->hdr[0].load(std::memory_order_relaxed);
      if ((h0 != 0 && h0 != kKvFormat) || sb->hdr[1].load(std::memory_order_relaxed) != 0) {
        stale_stash_cleared_.fetch_add(1, std::memory_order_relaxed);
      }
      sb->hdr[1].store(0, std::memory_order_relaxed);
      sb->hdr[0].store(kKvFormat, std::memory_order_release);
      persist_.Flush(sb, 64);
    }
    persist_.Fence();
  }
  const uint64_t stride = uint64_t{1} << (d->depth - EntryDepth(e));
  const uint64_t first = i & ~(stride - 1);
  const uint64_t ne = PackEntry(sid, EntryDepth(e), to);
  WriteStride(d, first, stride, [ne](uint64_t) { return ne; });
  (to == kStash ? to_stash_ : to_two_choice_).fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

template <pm::PersistPolicy P, bool R, bool M>
bool Pea<P, R, M>::Place(const std::vector<Item>& items, uint32_t s, BucketImage* img,
                      BucketImage* stash, bool* together) const {
  *together = true;
  // Build order inside a bucket: lines 1..3 first, so that line 0 stays free for the next
  // one-flush inserts; slot 14 (no fingerprint) last.
  static constexpr int kOrder[kSlots] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 0, 1, 2, 14};
  const uint32_t nb = params_.segment_buckets;
  for (uint32_t b = 0; b < nb; b++) {
    img[b].hdr[0] = kKvFormat;
    img[b].hdr[1] = 0;
  }
  for (int x = 0; x < 2; x++) {
    stash[x].hdr[0] = kKvFormat;
    stash[x].hdr[1] = 0;
  }
  auto count = [](const BucketImage& b) {
    return PtrSlots(b.hdr[0]) + std::popcount(KvOcc(b.hdr[0]));
  };
  // pea-multi: the caller orders the pointer items first, so each bucket receives its pointer
  // slots before any key/value slot and they form its front (paper 3.3).
  auto put = [](BucketImage& b, const Item& it) {
    const int nptr = PtrSlots(b.hdr[0]);
    int j;
    if (it.ptr) {
      j = nptr;  // the marker bit moves from bit j to bit j + 1
      b.hdr[0] = (b.hdr[0] & ~uint64_t{0xFFFF}) | (uint64_t{1} << (j + 1));
    } else {
      const uint32_t occ = KvOcc(b.hdr[0]);
      int x = 0;
      while (kOrder[x] < nptr || (occ >> kOrder[x] & 1)) x++;
      j = kOrder[x];
      b.hdr[0] |= uint64_t{1} << (1 + j);
    }
    b.kv[2 * j] = it.key;
    b.kv[2 * j + 1] = it.value;
    if (j < kFpSlots) SetFpByte(b.hdr, j, Fp(it.hash));
  };
  // pea-multi: does image bucket b hold a slot of it.key? (A key's slots are placed together
  // where there is room, as inserts do; *together says whether every key's were.)
  auto holds = [](const BucketImage& b, const Item& it) {
    const uint32_t live = KvOcc(b.hdr[0]) | ((1u << PtrSlots(b.hdr[0])) - 1);
    const uint32_t fp = Match16(reinterpret_cast<const uint8_t*>(b.hdr), Fp(it.hash)) >> 2;
    for (uint32_t m = (fp | (1u << kFpSlots)) & live; m; m &= m - 1) {
      if (b.kv[2 * std::countr_zero(m)] == it.key) return true;
    }
    return false;
  };
  for (const Item& it : items) {
    const uint32_t b1 = Bucket1(it.hash);
    BucketImage* tgt = nullptr;
    const int o1 = count(img[b1]);
    BucketImage* home = nullptr;  // pea-multi: a candidate that already holds a slot of the key
    if (M && it.shared) {
      BucketImage* cands[4] = {&img[b1], nullptr, nullptr, nullptr};
      if (s != kSingleHash) cands[1] = &img[Bucket2(it.hash, b1)];
      if (s == kStash) cands[2] = &stash[0], cands[3] = &stash[1];
      for (BucketImage* c : cands) {
        if (c && !home && holds(*c, it)) home = c;
      }
    }
    if (home && count(*home) < kSlots) {
      tgt = home;
    } else if (s == kSingleHash) {
      if (o1 < kSlots) tgt = &img[b1];
    } else {
      const uint32_t b2 = Bucket2(it.hash, b1);
      const int o2 = count(img[b2]);
      if (o1 < kSlots || o2 < kSlots) tgt = o2 < o1 ? &img[b2] : &img[b1];
      if (!tgt && s == kStash) {
        const int s0 = count(stash[0]), s1 = count(stash[1]);
        if (s0 < kSlots || s1 < kSlots) tgt = s1 < s0 ? &stash[1] : &stash[0];
      }
    }
    if (!tgt) return false;
    if (home && tgt != home) *together = false;
    put(*tgt, it);
  }
  return true;
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::Plan(std::vector<Item>&& items, uint64_t prefix, uint32_t depth,
                       std::vector<Leaf>* leaves) const {
  // Four quarters at depth + 2; a quarter that fits under no allowed strategy splits again.
  if (depth + 2 > params_.max_depth) {
    return Status::OutOfSpace("pea: a segment at max_depth " + std::to_string(params_.max_depth) +
                              " cannot hold its keys");
  }
  const uint32_t nd = depth + 2;
  std::vector<Item> q[4];
  for (const Item& it : items) q[(it.hash >> (64 - nd)) & 3].push_back(it);
  items.clear();
  items.shrink_to_fit();
  for (uint64_t x = 0; x < 4; x++) {
    Leaf leaf;
    leaf.prefix = (prefix << 2) | x;
    leaf.depth = nd;
    leaf.img.reset(new BucketImage[params_.segment_buckets]);
    bool placed = false;
    for (uint32_t s = first_strategy_; s <= last_strategy_ && !placed; s++) {
      if (Place(q[x], s, leaf.img.get(), leaf.stash, &leaf.together)) {
        leaf.strategy = s;
        placed = true;
      }
    }
    if (placed) {
      leaves->push_back(std::move(leaf));
    } else {
      leaf.img.reset();
      PMHASH_RETURN_IF_ERROR(Plan(std::move(q[x]), leaf.prefix, nd, leaves));
    }
  }
  return Status::OK();
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::Split(Directory* d, uint64_t i, uint64_t e, uint32_t* need_depth) {
  const auto started = ResizeLog::Now();
  const uint64_t sid = EntrySid(e);
  const uint32_t ld = EntryDepth(e);
  const uint32_t st = EntryStrategy(e);
  const uint32_t g = d->depth;
  const uint64_t stride = uint64_t{1} << (g - ld);
  const uint64_t first = i & ~(stride - 1);
  SegLocks& L = locks_[sid];
  // Wait for in-flight fast-path writers (they validated the segment version before we locked).
  for (int x = 0; x < kBucketLocks; x++) L.bucket[x].Lock();
  auto release = [&](bool dead) {
    for (int x = 0; x < kBucketLocks; x++) L.bucket[x].Unlock();
    if (!dead) L.seg.Unlock();  // a dead segment keeps its lock held until reuse
  };

  // Collect the live entries.
  std::vector<Item> items;
  items.reserve(static_cast<size_t>(params_.segment_buckets) * kSlots);
  std::vector<uint64_t> emptied;  // pea-multi: pointer slots of emptied lists are dropped
  bool any_ptr = false;
  // pea-multi: a key's slots share one bucket while the segment is `together`, so Place need
  // look for a key's placed slots only from a (key, value) slot whose key an earlier slot of its
  // bucket holds (items are placed in the order collected); otherwise every item may have some.
  const bool together = M && L.together.load(std::memory_order_relaxed) != 0;
  auto collect = [&](const PmBucket* b) {
    const uint64_t w[2] = {b->hdr[0].load(std::memory_order_relaxed),
                           b->hdr[1].load(std::memory_order_relaxed)};
    const int nptr = PtrSlots(w[0]);
    for (int j = 0; j < nptr; j++) {
      const Key k = b->slots[j].key.load(std::memory_order_relaxed);
      const uint64_t head = b->slots[j].value.load(std::memory_order_relaxed);
      const ValueNode* n = CheckedNode(head);  // (a damaged list moves as it is: I15)
      if (n != nullptr && n->state.load(std::memory_order_relaxed) == 0) {
        emptied.push_back(head);
        continue;
      }
      items.push_back({k, head, SlotHash(k), true, true});
      any_ptr = true;
    }
    const uint32_t live = KvOcc(w[0]) | ((1u << nptr) - 1);
    for (uint32_t m = KvOcc(w[0]); m; m &= m - 1) {
      const int j = std::countr_zero(m);
      const Key k = b->slots[j].key.load(std::memory_order_relaxed);
      bool shared = !together;
      if constexpr (M) {
        // The slots collected before this one from its bucket (the pointer slots, then the
        // (key, value) slots below j) whose fingerprint matches j's (slot kFpSlots has none:
        // all of them). A key's first slot needs no search: nothing of the key is placed yet.
        uint32_t earlier = live & ((1u << j) - 1);
        if (j < kFpSlots) {
          earlier &= Match16(reinterpret_cast<const uint8_t*>(w), GetFpByte(w, j)) >> 2;
        }
        for (uint32_t o = earlier; o && !shared; o &= o - 1) {
          shared = b->slots[std::countr_zero(o)].key.load(std::memory_order_relaxed) == k;
        }
      }
      items.push_back({k, b->slots[j].value.load(std::memory_order_relaxed), SlotHash(k), false,
                       shared});
    }
  };
  for (uint32_t b = 0; b < params_.segment_buckets; b++) collect(BucketAt(sid, b));
  if (st == kStash) {
    collect(StashBucket(sid, 0));
    collect(StashBucket(sid, 1));
  }
  if (any_ptr) {
    // Pointer slots first: each new bucket gets them as its prefix.
    std::stable_partition(items.begin(), items.end(), [](const Item& it) { return it.ptr; });
  }
  std::vector<Leaf> leaves;
  const uint64_t prefix = ld == 0 ? 0 : first >> (g - ld);
  if (Status s = Plan(std::move(items), prefix, ld, &leaves); !s.ok()) {
    release(false);
    return s;
  }
  uint32_t maxd = 0;
  for (const Leaf& l : leaves) maxd = std::max(maxd, l.depth);
  if (maxd > g) {
    release(false);
    *need_depth = maxd;
    return Status::OK();
  }
  // Allocate and write the new segments (I6).
  pm::ChunkAllocator& alloc = pool_->allocator();
  for (size_t x = 0; x < leaves.size(); x++) {
    auto off = alloc.Allocate(1);
    Status s = off.ok() ? Status::OK() : off.status();
    if (off.ok()) {
      leaves[x].sid = SidOf(off.value());
      locks_[leaves[x].sid].seg.MarkLocked();  // fresh or dead
      locks_[leaves[x].sid].together.store(leaves[x].together, std::memory_order_relaxed);
      if (leaves[x].strategy == kStash) s = EnsureStash(leaves[x].sid);
      if (!s.ok()) x++;  // free this one too
    }
    if (!s.ok()) {
      for (size_t y = 0; y < x; y++) alloc.Free(OffsetOfSid(leaves[y].sid));  // locks stay held
      release(false);
      return s;
    }
  }
  for (Leaf& l : leaves) {
    persist_.NtCopy(SegmentBase(l.sid), l.img.get(), seg_bytes_);
    if (l.strategy == kStash) {
      for (int s = 0; s < 2; s++) {
        persist_.NtCopy(StashBucket(l.sid, s), &l.stash[s], sizeof(BucketImage));
      }
    }
  }
  persist_.Fence();
  // Two-step directory update (I5): lowest entry last.
  WriteStride(d, first, stride, [&](uint64_t x) {
    const uint64_t h = (x << (64 - g));  // any hash with the GD-bit prefix x (g >= 2 here)
    for (const Leaf& l : leaves) {
      if ((h >> (64 - l.depth)) == l.prefix) return PackEntry(l.sid, l.depth, l.strategy);
    }
    return e;  // unreachable: the leaves tile the segment's range
  });
  for (const Leaf& l : leaves) locks_[l.sid].seg.Unlock();
  release(true);
  if constexpr (M) {
    for (uint64_t head : emptied) values_->Retire(head, NodeBytes(Node(head)->geom));
  }
  limbo_chunks_.fetch_add(1, std::memory_order_relaxed);
  epoch_.Retire([this, sid] {
    pool_->allocator().Free(OffsetOfSid(sid));
    limbo_chunks_.fetch_sub(1, std::memory_order_relaxed);
  });
  splits_.fetch_add(1, std::memory_order_relaxed);
  if (st == kStash) stash_splits_.fetch_add(1, std::memory_order_relaxed);
  resize_log_.Record(started);
  return Status::OK();
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::Expand(const Directory* seen, uint32_t target) {
  const auto started = ResizeLog::Now();
  LockGuard<RwSpinLock> g(dir_lock_);
  Directory* d = dir_.load(std::memory_order_acquire);
  if (d != seen && d->depth >= target) return Status::OK();
  while (d->depth < target) {
    if (d->depth + 1 > params_.max_depth) {
      return Status::OutOfSpace("pea: directory at max_depth " + std::to_string(params_.max_depth));
    }
    const uint32_t ng = d->depth + 1;
    const uint64_t n = uint64_t{1} << ng;
    const uint32_t chunks = ChunksFor(n * 8);
    auto off = pool_->allocator().Allocate(chunks);
    if (!off.ok()) return off.status();
    std::vector<uint64_t> img(n);
    for (uint64_t x = 0; x < d->size(); x++) {
      img[2 * x] = img[2 * x + 1] = d->entries[x].load(std::memory_order_relaxed);
    }
    persist_.NtCopy(pool_->template At<char>(off.value()), img.data(), n * 8);
    persist_.Fence();  // I6
    auto nd = std::make_unique<Directory>();
    nd->depth = ng;
    nd->root = 1 - d->root;
    nd->offset = off.value();
    nd->chunks = chunks;
    nd->entries = pool_->template At<std::atomic<uint64_t>>(off.value());
    pool_->SetRoot(nd->root, PackDesc(ng, off.value()));  // I7: the switch, one 8-byte write
    d = nd.get();
    dir_.store(d, std::memory_order_release);
    dirs_.push_back(std::move(nd));  // the old region stays allocated until Close
    doublings_.fetch_add(1, std::memory_order_relaxed);
  }
  resize_log_.Record(started);
  return Status::OK();
}

}  // namespace pmhash::pea
