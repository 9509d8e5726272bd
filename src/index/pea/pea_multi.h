// src/index/pea/pea_multi.h — Pea Hash with duplicate keys ("pea-multi", paper 3.3): data-aware
// adaptive buckets, value buffers and chains, the redo log, and their recovery.
//
// Part of the Pea engine (src/index/pea/pea.h: the paper, the design summary, the layout and
// the crash invariants, I10..I13 for this part); pea.h includes it at its end.
#pragma once

#include "index/pea/pea.h"

namespace pmhash::pea {

template <pm::PersistPolicy P, bool R, bool M>
uint32_t Pea<P, R, M>::BufferCapacity(uint32_t type) const {
  if (params_.adaptive_buckets) {
    return static_cast<uint32_t>(((uint64_t{256} << type) - sizeof(ValueNode)) / 8);
  }
  return 4u << type;  // the baseline's buffer: 4 values, doubling
}

template <pm::PersistPolicy P, bool R, bool M>
Result<uint64_t> Pea<P, R, M>::NewNode(Key k, uint32_t type, const Value* vals, uint64_t n,
                                       uint64_t next) {
  const uint32_t cap = type == kChainType ? chain_capacity_ : BufferCapacity(type);
  const uint64_t geom = PackGeom(cap, type);
  const uint64_t bytes = NodeBytes(geom);
  auto off = values_->Allocate(bytes, persist_);
  if (!off.ok() && off.status().IsOutOfSpace() && epoch_.pending() != 0) {
    epoch_.Reclaim();  // retired buffers may be waiting for the epoch to move
    off = values_->Allocate(bytes, persist_);
  }
  if (!off.ok()) return off.status();
  ValueNode* node = Node(off.value());
  node->key.store(k, std::memory_order_relaxed);
  node->state.store(PackState(n, next), std::memory_order_relaxed);
  node->geom = geom;
  node->reserved = 0;
  std::atomic<uint64_t>* v = NodeValues(node);
  for (uint64_t i = 0; i < n; i++) v[i].store(vals[i], std::memory_order_relaxed);
  persist_.Flush(node, sizeof(ValueNode) + 8 * n);
  return off;
}

template <pm::PersistPolicy P, bool R, bool M>
template <class Out>
bool Pea<P, R, M>::ReadList(uint64_t head, Out* out) const {
  uint64_t off = head;
  for (uint64_t steps = 0; off != 0; steps++) {
    // A lock-free reader validates its bucket before it follows a slot's pointer, and the
    // epoch keeps what it reads allocated; the checks only bound what a stale read could do.
    if (steps > chunk_count_ || !values_->PlausibleRecord(off, sizeof(ValueNode))) return false;
    const ValueNode* n = Node(off);
    const uint64_t st = n->state.load(std::memory_order_acquire);
    uint64_t c = std::min<uint64_t>(NodeCount(st), NodeCapacity(n->geom));
    if (!values_->Contains(off, sizeof(ValueNode) + 8 * c)) return false;
    if constexpr (std::is_same_v<Out, FirstValue>) c = std::min<uint64_t>(c, 1);  // Find
    const std::atomic<uint64_t>* v = NodeValues(const_cast<ValueNode*>(n));
    if constexpr (std::is_same_v<Out, std::vector<Value>>) {
      // One resize, then a plain copy loop: push_back reloads the vector's end and capacity for
      // every value, and that loop's speed swung 1.4x with where the linker placed it.
      const size_t at = out->size();
      out->resize(at + c);
      Value* dst = out->data() + at;
      for (uint64_t i = 0; i < c; i++) dst[i] = v[i].load(std::memory_order_relaxed);
    } else {
      for (uint64_t i = 0; i < c; i++) out->push_back(v[i].load(std::memory_order_relaxed));
    }
    if constexpr (std::is_same_v<Out, FirstValue>) {
      if (!out->empty()) break;
    }
    off = NodeNext(st);
  }
  return true;
}

template <pm::PersistPolicy P, bool R, bool M>
void Pea<P, R, M>::RetireList(uint64_t head, bool keep_head) {
  // REQUIRES: the list is durably unreachable (but for its head if keep_head), an epoch guard.
  // Bounded (I15): a forged list is retired up to its first bad node or as long as the heap.
  uint64_t steps = 0;
  for (uint64_t off = head, first = 1; off != 0 && steps <= chunk_count_; first = 0, steps++) {
    const ValueNode* n = CheckedNode(off);
    if (n == nullptr) return;
    const uint64_t next = NodeNext(n->state.load(std::memory_order_relaxed));
    if (!(first && keep_head)) values_->Retire(off, NodeBytes(n->geom));
    off = next;
  }
}

template <pm::PersistPolicy P, bool R, bool M>
template <class Fn>
void Pea<P, R, M>::ForEachMatch(const PmBucket* b, const Probe& p, Fn&& fn) const {
  const Key k = p.k;
  const uint64_t w0 = b->hdr[0].load(std::memory_order_acquire);
  const uint64_t w1 = b->hdr[1].load(std::memory_order_relaxed);
  const int nptr = PtrSlots(w0);
  const uint32_t live = KvOcc(w0) | ((1u << nptr) - 1);
  const __m128i tags = _mm_set_epi64x(static_cast<long long>(w1), static_cast<long long>(w0));
  for (uint32_t m = (Match16(tags, Fp(p.h)) >> 2) & live; m; m &= m - 1) {
    const int j = std::countr_zero(m);
    if (b->slots[j].key.load(std::memory_order_relaxed) == k) fn(j, j < nptr);
  }
  if (((live >> kFpSlots) & 1) && b->slots[kFpSlots].key.load(std::memory_order_relaxed) == k) {
    fn(kFpSlots, kFpSlots < nptr);
  }
}

template <pm::PersistPolicy P, bool R, bool M>
void Pea<P, R, M>::CommitStores(const WordStores& stores) {
  if (stores.empty()) return;
  if (stores.size() == 1) {
    stores[0].first->store(stores[0].second, std::memory_order_release);
    persist_.Persist(stores[0].first, 8);
    return;
  }
  // I12: the pairs are durable before n, the commit; applied and flushed before n is cleared,
  // and n is clear (durably) before the caller releases its locks.
  uint64_t bit = 0;
  Backoff backoff;  // (every log is taken: their holders are persisting)
  for (uint64_t f = free_logs_.load(std::memory_order_acquire);;) {
    if (f == 0) {
      backoff.Pause();
      f = free_logs_.load(std::memory_order_acquire);
      continue;
    }
    bit = f & (~f + 1);
    if (free_logs_.compare_exchange_weak(f, f & ~bit, std::memory_order_acquire)) break;
  }
  MultiLog* log = &logs_[std::countr_zero(bit)];
  const uint64_t n = stores.size();
  for (uint64_t x = 0; x < n; x++) {
    log->w[2 * x] = static_cast<uint64_t>(reinterpret_cast<char*>(stores[x].first) - pool_->base());
    log->w[2 * x + 1] = stores[x].second;
  }
  persist_.Flush(log->w, 16 * n);
  persist_.Fence();
  log->n.store(n, std::memory_order_release);
  persist_.Persist(&log->n, 8);
  for (const auto& [word, value] : stores) {
    word->store(value, std::memory_order_release);
    persist_.Flush(word, 8);
  }
  persist_.Fence();
  log->n.store(0, std::memory_order_relaxed);
  persist_.Persist(&log->n, 8);
  free_logs_.fetch_or(bit, std::memory_order_release);
  logged_commits_.fetch_add(1, std::memory_order_relaxed);
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::AppendValue(std::atomic<uint64_t>* slot_word, Key k, Value v) {
  const uint64_t head = slot_word->load(std::memory_order_relaxed);
  ValueNode* n = CheckedNode(head);
  if (n == nullptr) return Status::Corruption("pea-multi: the value list of a key is damaged");
  const uint64_t st = n->state.load(std::memory_order_relaxed);
  const uint64_t c = NodeCount(st);
  const uint32_t type = NodeType(n->geom);
  if (c < NodeCapacity(n->geom)) {
    // I11: the value is durable before the count that makes it live.
    std::atomic<uint64_t>* slot = &NodeValues(n)[c];
    slot->store(v, std::memory_order_relaxed);
    persist_.Persist(slot, 8);
    n->state.store(PackState(c + 1, NodeNext(st)), std::memory_order_release);
    persist_.Persist(&n->state, 8);
    return Status::OK();
  }
  // Full: the values move to a buffer of the next type, or a chain node goes in front.
  const bool grow = type != kChainType && type < max_buffer_type_;
  Result<uint64_t> node = Status::OK();
  if (grow) {
    std::vector<Value> vals(c + 1);
    const std::atomic<uint64_t>* old = NodeValues(n);
    for (uint64_t i = 0; i < c; i++) vals[i] = old[i].load(std::memory_order_relaxed);
    vals[c] = v;
    node = NewNode(k, type + 1, vals.data(), c + 1, NodeNext(st));
  } else {
    node = NewNode(k, kChainType, &v, 1, head);
  }
  if (!node.ok()) return node.status();
  persist_.Fence();
  slot_word->store(node.value(), std::memory_order_release);  // the commit (I11)
  persist_.Persist(slot_word, 8);
  if (grow) {
    values_->Retire(head, NodeBytes(n->geom));
    buffer_grows_.fetch_add(1, std::memory_order_relaxed);
  } else {
    chain_nodes_.fetch_add(1, std::memory_order_relaxed);
  }
  return Status::OK();
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::Compact(PmBucket* b, Key x, Value v, bool* freed, bool* inserted) {
  *freed = *inserted = false;
  const uint64_t w0 = b->hdr[0].load(std::memory_order_relaxed);
  const int nptr = PtrSlots(w0);
  struct Entry {
    Key key;
    uint64_t word;
  };
  std::vector<Entry> ptrs, kvs;
  std::vector<uint64_t> dropped;  // pointer slots whose list is empty
  for (int j = 0; j < nptr; j++) {
    const uint64_t head = b->slots[j].value.load(std::memory_order_relaxed);
    const ValueNode* n = CheckedNode(head);
    if (n == nullptr) return Status::Corruption("pea-multi: a value list in the bucket is damaged");
    if (n->state.load(std::memory_order_relaxed) == 0) {
      dropped.push_back(head);
    } else {
      ptrs.push_back({b->slots[j].key.load(std::memory_order_relaxed), head});
    }
  }
  for (uint32_t m = KvOcc(w0); m; m &= m - 1) {
    const int j = std::countr_zero(m);
    kvs.push_back({b->slots[j].key.load(std::memory_order_relaxed),
                   b->slots[j].value.load(std::memory_order_relaxed)});
  }
  // Keys with several entries (the pending one counts) become (key, pointer) slots.
  std::stable_sort(kvs.begin(), kvs.end(), [](const Entry& a, const Entry& c) { return a.key < c.key; });
  std::vector<Entry> keep;
  std::vector<std::pair<Key, std::vector<Value>>> groups;
  for (size_t i = 0; i < kvs.size();) {
    size_t e = i;
    while (e < kvs.size() && kvs[e].key == kvs[i].key) e++;
    const bool pending = kvs[i].key == x;
    if (e - i >= 2 || pending) {
      std::vector<Value> vals;
      for (size_t y = i; y < e; y++) vals.push_back(kvs[y].word);
      if (pending) vals.push_back(v);
      groups.emplace_back(kvs[i].key, std::move(vals));
    } else {
      keep.push_back(kvs[i]);
    }
    i = e;
  }
  if (groups.empty() && dropped.empty()) {
    compactions_empty_.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }
  // New buffers, durable before the bucket names them (I10).
  std::vector<uint64_t> made;
  for (const auto& [key, vals] : groups) {
    uint32_t type = 0;
    while (type < max_buffer_type_ && BufferCapacity(type) < vals.size()) type++;
    auto node = NewNode(key, type, vals.data(), vals.size(), 0);
    if (!node.ok()) {
      for (size_t y = 0; y < made.size(); y++) {
        values_->Free(made[y], NodeBytes(Node(made[y])->geom));
      }
      return node.status();
    }
    made.push_back(node.value());
    ptrs.push_back({key, node.value()});
    *inserted |= key == x;
  }
  persist_.Fence();
  // The new image: pointer slots in front (marker bit = their number), then key/value slots.
  uint64_t img[2 + 2 * kSlots] = {};
  const int np = static_cast<int>(ptrs.size());
  img[0] = uint64_t{1} << np;
  int j = 0;
  auto put = [&](const Entry& en) {
    img[2 + 2 * j] = en.key;
    img[3 + 2 * j] = en.word;
    if (j < kFpSlots) SetFpByte(img, j, Fp(SlotHash(en.key)));
    j++;
  };
  for (const Entry& en : ptrs) put(en);
  for (const Entry& en : keep) {
    img[0] |= uint64_t{1} << (1 + j);
    put(en);
  }
  WordStores stores;
  auto* words = reinterpret_cast<std::atomic<uint64_t>*>(b);
  for (int w = 0; w < 2 + 2 * kSlots; w++) {
    // Words of slots that end up free need not change.
    const bool used = w < 2 || (w - 2) / 2 < j;
    if (used && words[w].load(std::memory_order_relaxed) != img[w]) stores.push_back({&words[w], img[w]});
  }
  CommitStores(stores);
  for (uint64_t head : dropped) values_->Retire(head, NodeBytes(Node(head)->geom));
  compactions_.fetch_add(1, std::memory_order_relaxed);
  *freed = j < kSlots;
  return Status::OK();
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::MultiWrite(const Probe& p, Value v, WriteMode mode) {
  if (mode != WriteMode::kInsert) {
    return Status::NotSupported(
        "pea-multi: Update and Upsert are not defined for a key with several values (use "
        "Erase(k, v) or EraseAll(k), then Insert)");
  }
  EpochManager::Guard guard(epoch_);
  const Key k = p.k;
  for (;;) {
    const Locked w = LockAndLocate(p);
    std::atomic<uint64_t>* list = nullptr;  // a pointer slot of k
    PmBucket* home = nullptr;               // the first candidate with a (key, value) slot of k
    for (int c = 0; c < w.nc && !list; c++) {
      ForEachMatch(w.cand[c], p, [&](int j, bool ptr) {
        if (ptr && !list) list = &w.cand[c]->slots[j].value;
        if (!ptr && !home) home = w.cand[c];
      });
    }
    Status result = Status::OK();
    bool done = true;
    uint32_t modified = 0;
    if (list) {
      result = AppendValue(list, k, v);
      modified = w.mask;
      if (result.ok()) size_.Add(1);
    } else {
      PmBucket* tgt = nullptr;
      const int o1 = Used(w.cand[0]);
      if (home && Used(home) < kSlots) {
        // Keep a key's entries together where there is room: EraseAll then clears them with
        // one header store instead of a redo-logged step over two buckets.
        tgt = home;
      } else if (w.st == kSingleHash) {
        if (o1 < kSlots) tgt = w.cand[0];
      } else {
        const int o2 = Used(w.cand[1]);
        if (o1 < kSlots || o2 < kSlots) tgt = o2 < o1 ? w.cand[1] : w.cand[0];
        if (!tgt && w.st == kStash) {
          const int s0 = Used(w.cand[2]), s1 = Used(w.cand[3]);
          if (s0 < kSlots || s1 < kSlots) tgt = s1 < s0 ? w.cand[3] : w.cand[2];
        }
      }
      if (tgt && params_.adaptive_buckets) {
        // k now has slots in two buckets: readers of this segment must read every candidate
        // (stored before the unlock below publishes the insert).
        if (home && tgt != home) w.L->together.store(0, std::memory_order_relaxed);
        InsertIntoBucket(tgt, k, v, Fp(p.h));
        modified = w.mask;
        size_.Add(1);
      } else if (tgt) {
        // Baseline: every key is a (key, pointer) slot to a buffer of 4 values.
        auto node = NewNode(k, 0, &v, 1, 0);
        result = node.status();
        if (node.ok()) {
          persist_.Fence();
          uint64_t hw[2] = {tgt->hdr[0].load(std::memory_order_relaxed),
                            tgt->hdr[1].load(std::memory_order_relaxed)};
          const int j = PtrSlots(hw[0]);
          tgt->slots[j].value.store(node.value(), std::memory_order_relaxed);
          tgt->slots[j].key.store(k, std::memory_order_release);
          if (j < kFpSlots) SetFpByte(hw, j, Fp(p.h));
          hw[0] = (hw[0] & ~uint64_t{0xFFFF}) | (uint64_t{1} << (j + 1));
          tgt->hdr[1].store(hw[1], std::memory_order_relaxed);  // fingerprint of a free slot
          if (SlotLine(j) != 0 || params_.tear_safe) {
            if (params_.tear_safe) persist_.Flush(tgt, 64);
            persist_.Persist(&tgt->slots[j], sizeof(PmSlot));  // I2 for a pointer slot
          }
          tgt->hdr[0].store(hw[0], std::memory_order_release);
          persist_.Persist(tgt, 64);
          modified = w.mask;
          size_.Add(1);
        }
      } else if (params_.adaptive_buckets) {
        // Every candidate is full: compact them in probe order (paper 3.3); the segment is full
        // under its strategy only when that frees nothing.
        bool freed = false, inserted = false;
        for (int c = 0; c < w.nc && !freed && !inserted && result.ok(); c++) {
          result = Compact(w.cand[c], k, v, &freed, &inserted);
        }
        if (freed || inserted) modified = w.mask;
        if (inserted) size_.Add(1);
        done = inserted || !result.ok();
        if (!done && freed) {
          Unlock(w, modified);
          continue;
        }
      } else {
        done = false;
      }
    }
    Unlock(w, modified);
    if (done) return result;
    PMHASH_RETURN_IF_ERROR(SlowPath(p.h, w.e, w.d));
  }
}

template <pm::PersistPolicy P, bool R, bool M>
template <class Out>
Status Pea<P, R, M>::SearchAll(Key k, Out* out) const {
  constexpr bool kFirstOnly = std::is_same_v<Out, FirstValue>;
  EpochManager::Guard guard(epoch_);
  const Probe p = MakeProbe(k);
  const uint64_t h = p.h;
  const uint32_t b1 = Bucket1(h);
  uint64_t heads[4 * kSlots];
  Backoff backoff;
  for (;;) {
    out->clear();
    int nh = 0;
    const Directory* d = dir_.load(std::memory_order_acquire);
    const uint64_t i = DirIndex(h, d->depth);
    const uint64_t e = d->entries[i].load(std::memory_order_acquire);
    const uint64_t sid = EntrySid(e);
    const uint32_t st = EntryStrategy(e);
    const PmBucket* cand[4] = {BucketAt(sid, b1), nullptr, nullptr, nullptr};
    int nc = 1;
    uint32_t mask = 1u << (b1 & (kBucketLocks - 1));
    // Both candidates are read whole (a key's entries may be in either): their misses overlap.
    PrefetchBucket(cand[0]);
    if (st >= kTwoChoice) {
      const uint32_t b2 = Bucket2(h, b1);
      cand[nc++] = BucketAt(sid, b2);
      mask |= 1u << (b2 & (kBucketLocks - 1));
      if constexpr (kFirstOnly) {
        __builtin_prefetch(cand[1]);  // read only if b1 has no entry of k
      } else {
        PrefetchBucket(cand[1]);
      }
    }
    SegLocks& L = locks_[sid];
    uint32_t sv;
    if (!SnapshotSegment(L, d, i, e, &sv, &backoff)) continue;
    if (st == kStash) {
      cand[nc++] = StashBucket(sid, 0);
      cand[nc++] = StashBucket(sid, 1);
      mask |= 3u;
    }
    uint32_t ver[kBucketLocks];
    bool busy = false;
    for (uint32_t m = mask; m; m &= m - 1) {
      const int x = std::countr_zero(m);
      ver[x] = L.bucket[x].Snapshot();
      busy |= VersionLock::IsLockedVersion(ver[x]);
    }
    if (busy) {
      backoff.Pause();
      continue;
    }
    // Find needs one value; FindAll may stop at the first candidate holding k when the segment
    // keeps every key in one bucket (a writer that changes that bumps a version validated below).
    const bool first_bucket = kFirstOnly || L.together.load(std::memory_order_relaxed) != 0;
    for (int c = 0; c < nc; c++) {
      if (first_bucket && (nh > 0 || !out->empty())) break;
      ForEachMatch(cand[c], p, [&](int j, bool ptr) {
        if (ptr) {
          heads[nh++] = cand[c]->slots[j].value.load(std::memory_order_acquire);
        } else {
          out->push_back(cand[c]->slots[j].value.load(std::memory_order_relaxed));
        }
      });
    }
    auto valid = [&] {
      for (uint32_t m = mask; m; m &= m - 1) {
        const int x = std::countr_zero(m);
        if (!L.bucket[x].Validate(ver[x])) return false;
      }
      return L.seg.Validate(sv);
    };
    // I13: the pointers are validated before they are followed, the values after.
    if (!valid()) continue;
    bool ok = true;
    for (int x = 0; x < nh && ok; x++) ok = ReadList(heads[x], out);
    if (!valid()) continue;
    // The buckets did not change, so a list ReadList refused is damaged (I15), not being
    // written (a writer's store into a list bumps its bucket's version; a node is reused only
    // after the epoch moved): answer, do not retry forever.
    if (!ok) return Status::Corruption("pea-multi: the value list of a key is damaged");
    return out->empty() ? Status::NotFound() : Status::OK();
  }
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::FindAll(Key k, std::vector<Value>* values) const requires M {
  return SearchAll(k, values);
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::ForEachValue(Key k, const std::function<void(Value)>& fn) const requires M {
  std::vector<Value> vals;
  const Status s = SearchAll(k, &vals);
  for (Value v : vals) fn(v);
  return s;
}

template <pm::PersistPolicy P, bool R, bool M>
uint64_t Pea<P, R, M>::Count(Key k) const requires M {
  std::vector<Value> vals;
  (void)SearchAll(k, &vals);
  return vals.size();
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::Erase(Key k, Value v) requires M {
  if (life_.closed()) [[unlikely]] return index::Lifecycle::ClosedError(kKindName);
  EpochManager::Guard guard(epoch_);
  const Probe p = MakeProbe(k);
  const Locked w = LockAndLocate(p);
  bool found = false;
  uint64_t retire = 0;  // a node replaced or unlinked
  for (int c = 0; c < w.nc && !found; c++) {
    PmBucket* b = w.cand[c];
    ForEachMatch(b, p, [&](int j, bool ptr) {
      if (found || ptr || b->slots[j].value.load(std::memory_order_relaxed) != v) return;
      const uint64_t w0 = b->hdr[0].load(std::memory_order_relaxed);
      b->hdr[0].store(w0 & ~(uint64_t{1} << (1 + j)), std::memory_order_release);  // I4
      persist_.Persist(b, 64);
      found = true;
    });
  }
  Status result = Status::OK();
  for (int c = 0; c < w.nc && !found; c++) {
    PmBucket* b = w.cand[c];
    ForEachMatch(b, p, [&](int j, bool ptr) {
      if (found || !ptr) return;
      // The word that names the current node: the slot's, then the previous node's state.
      std::atomic<uint64_t>* link = &b->slots[j].value;
      bool link_is_slot = true;
      uint64_t steps = 0;
      for (uint64_t off = link->load(std::memory_order_relaxed); off != 0 && !found; steps++) {
        ValueNode* n = CheckedNode(off);
        if (n == nullptr || steps > chunk_count_) {
          result = Status::Corruption("pea-multi: the value list of a key is damaged");
          return;
        }
        const uint64_t st = n->state.load(std::memory_order_relaxed);
        const uint64_t cnt = NodeCount(st);
        std::atomic<uint64_t>* vals = NodeValues(n);
        uint64_t i = 0;
        while (i < cnt && vals[i].load(std::memory_order_relaxed) != v) i++;
        if (i < cnt) {
          found = true;
          auto relink = [&](uint64_t target) {  // I11: one 8-byte store
            const uint64_t word =
                link_is_slot
                    ? target
                    : PackState(NodeCount(link->load(std::memory_order_relaxed)), target);
            link->store(word, std::memory_order_release);
            persist_.Persist(link, 8);
          };
          if (i == cnt - 1 && (cnt > 1 || link_is_slot)) {
            n->state.store(PackState(cnt - 1, NodeNext(st)), std::memory_order_release);
            persist_.Persist(&n->state, 8);
          } else if (i == cnt - 1) {
            relink(NodeNext(st));  // an emptied node after the head leaves the chain
            retire = off;
          } else {
            // Copy on write: the node without v (the last value fills its place).
            std::vector<Value> rest(cnt - 1);
            for (uint64_t y = 0; y + 1 < cnt; y++) {
              rest[y] = vals[y == i ? cnt - 1 : y].load(std::memory_order_relaxed);
            }
            auto node = NewNode(k, NodeType(n->geom), rest.data(), cnt - 1, NodeNext(st));
            if (!node.ok()) {
              result = node.status();
              return;
            }
            persist_.Fence();
            relink(node.value());
            retire = off;
          }
          break;
        }
        link = &n->state;
        link_is_slot = false;
        off = NodeNext(st);
      }
    });
  }
  Unlock(w, found ? w.mask : 0);
  if (retire != 0) values_->Retire(retire, NodeBytes(Node(retire)->geom));
  if (!result.ok()) return result;
  if (!found) return Status::NotFound();
  size_.Add(-1);
  return Status::OK();
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::EraseAll(Key k) requires M {
  return EraseAllProbe(MakeProbe(k));
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::EraseAllProbe(const Probe& p) {
  if (life_.closed()) [[unlikely]] return index::Lifecycle::ClosedError(kKindName);
  EpochManager::Guard guard(epoch_);
  const Locked w = LockAndLocate(p);
  WordStores stores;
  std::array<uint64_t, kLogWords> tails;  // lists after emptied heads: unreachable once committed
  size_t ntails = 0;
  uint64_t removed = 0;
  bool damaged = false;  // a list that is not CheckedNodes (I15): nothing is stored
  // With every key of the segment in one bucket, the first candidate holding k has all of it.
  const bool first_bucket = w.L->together.load(std::memory_order_relaxed) != 0;
  bool seen = false;
  for (int c = 0; c < w.nc && !(first_bucket && seen); c++) {
    PmBucket* b = w.cand[c];
    const uint64_t w0 = b->hdr[0].load(std::memory_order_relaxed);
    uint64_t nw0 = w0;
    ForEachMatch(b, p, [&](int j, bool ptr) {
      seen = true;
      if (!ptr) {
        nw0 &= ~(uint64_t{1} << (1 + j));
        removed++;
        return;
      }
      const uint64_t off = b->slots[j].value.load(std::memory_order_relaxed);
      ValueNode* head = CheckedNode(off);
      if (head == nullptr || !ListPairs(off, &removed)) {
        damaged = true;
        return;
      }
      const uint64_t st = head->state.load(std::memory_order_relaxed);
      if (st == 0) return;
      stores.push_back({&head->state, 0});  // the head stays, empty (compaction drops it)
      tails[ntails++] = NodeNext(st);
    });
    if (nw0 != w0) stores.push_back({&b->hdr[0], nw0});
  }
  if (damaged) {
    Unlock(w, 0);
    return Status::Corruption("pea-multi: the value list of a key is damaged");
  }
  if (removed == 0) {
    Unlock(w, 0);
    return Status::NotFound();
  }
  CommitStores(stores);  // one step (I12)
  Unlock(w, w.mask);
  for (size_t x = 0; x < ntails; x++) RetireList(tails[x], false);
  size_.Add(-static_cast<int64_t>(removed));
  return Status::OK();
}

template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::CreateMulti() {
  const uint32_t chunks = ChunksFor(kMultiLogBytes);
  auto off = pool_->allocator().Allocate(chunks);
  if (!off.ok()) return off.status();
  std::vector<char> zero(uint64_t{chunks} * seg_bytes_, 0);
  persist_.NtCopy(pool_->template At<char>(off.value()), zero.data(), zero.size());
  persist_.Fence();
  pool_->SetRoot(3, off.value());
  return Status::OK();
}

// Recovery of pea-multi, after the directory and the segments are marked: committed redo logs
// are applied (I12), then every list a pointer slot names is validated and marked in the value
// heap (I13: nothing else is allocated), counting the pairs for Size().
template <pm::PersistPolicy P, bool R, bool M>
Status Pea<P, R, M>::RecoverMulti() {
  pm::ChunkAllocator& alloc = pool_->allocator();
  logs_offset_ = pool_->root(3);
  const uint32_t lchunks = ChunksFor(kMultiLogBytes);
  if (!alloc.ValidChunk(logs_offset_, lchunks)) {
    return Status::Corruption("pea-multi: log region offset " + std::to_string(logs_offset_) +
                              " is not in the heap");
  }
  if (Status s = alloc.MarkReachable(logs_offset_, lchunks); !s.ok()) {
    return Status::Corruption("pea-multi: log region: " + std::string(s.message()));
  }
  logs_ = pool_->template At<MultiLog>(logs_offset_);
  free_logs_.store(~uint64_t{0});
  const uint64_t heap_end = heap_offset_ + chunk_count_ * seg_bytes_;
  for (uint32_t x = 0; x < kMultiLogs; x++) {
    MultiLog& log = logs_[x];
    const uint64_t n = log.n.load(std::memory_order_relaxed);
    if (n == 0) continue;
    if (n > kLogWords) {
      return Status::Corruption("pea-multi: log " + std::to_string(x) + " claims " +
                                std::to_string(n) + " stores");
    }
    for (uint64_t y = 0; y < n; y++) {
      const uint64_t off = log.w[2 * y];
      if (off % 8 != 0 || off < heap_offset_ || off >= heap_end) {
        return Status::Corruption("pea-multi: log " + std::to_string(x) +
                                  " stores outside the heap (offset " + std::to_string(off) + ")");
      }
    }
    for (uint64_t y = 0; y < n; y++) {
      auto* word = pool_->template At<std::atomic<uint64_t>>(log.w[2 * y]);
      word->store(log.w[2 * y + 1], std::memory_order_relaxed);
      persist_.Flush(word, 8);
    }
    persist_.Fence();
    log.n.store(0, std::memory_order_relaxed);
    persist_.Persist(&log.n, 8);
  }

  values_->Reset();
  Status st = Status::OK();
  uint64_t pairs = 0;
  auto bucket = [&](const PmBucket* b) {
    pairs += std::popcount(Occupancy(b));
    for (int j = 0; j < PtrSlots(b->hdr[0].load(std::memory_order_relaxed)) && st.ok(); j++) {
      const Key k = b->slots[j].key.load(std::memory_order_relaxed);
      uint64_t off = b->slots[j].value.load(std::memory_order_relaxed);
      if (off == 0) st = Status::Corruption("pea-multi: a pointer slot of key " +
                                            std::to_string(k) + " names no value buffer");
      for (uint64_t steps = 0; off != 0 && st.ok(); steps++) {
        const std::string where = "pea-multi: value node at offset " + std::to_string(off);
        if (!values_->PlausibleRecord(off, sizeof(ValueNode))) {
          st = Status::Corruption(where + " is not in the heap");
          break;
        }
        const ValueNode* n = Node(off);
        if (!GeometryOk(n->geom) || n->reserved != 0) {
          st = Status::Corruption(where + " has an impossible type " +
                                  std::to_string(NodeType(n->geom)) + " / capacity " +
                                  std::to_string(NodeCapacity(n->geom)));
          break;
        }
        if (Status s = values_->MarkReachable(off, NodeBytes(n->geom)); !s.ok()) {
          st = Status::Corruption(where + ": " + std::string(s.message()));  // also: a cycle
          break;
        }
        const uint64_t state = n->state.load(std::memory_order_relaxed);
        if (n->key.load(std::memory_order_relaxed) != k ||
            NodeCount(state) > NodeCapacity(n->geom)) {
          st = Status::Corruption(where + " does not hold key " + std::to_string(k) +
                                  " or claims more values than it has room for");
          break;
        }
        pairs += NodeCount(state);
        off = NodeNext(state);
      }
    }
  };
  ForEachSegment(dir_.load(std::memory_order_relaxed), [&](uint64_t, uint64_t e) {
    const uint64_t sid = EntrySid(e);
    for (uint32_t b = 0; b < params_.segment_buckets && st.ok(); b++) bucket(BucketAt(sid, b));
    if (EntryStrategy(e) == kStash && st.ok()) {
      bucket(StashBucket(sid, 0));
      bucket(StashBucket(sid, 1));
    }
  });
  PMHASH_RETURN_IF_ERROR(st);
  size_base_.store(static_cast<int64_t>(pairs));
  size_known_.store(true);
  return Status::OK();
}

// REQUIRES quiescence. "" or what is wrong with the list of key k at `head`; *pairs += its
// values.
template <pm::PersistPolicy P, bool R, bool M>
std::string Pea<P, R, M>::CheckList(uint64_t head, Key k, uint64_t* pairs) const {
  uint64_t steps = 0;
  for (uint64_t off = head; off != 0; steps++) {
    if (steps > chunk_count_ || !values_->PlausibleRecord(off, sizeof(ValueNode))) {
      return "value list of key " + std::to_string(k) + " leaves the heap or loops";
    }
    const ValueNode* n = Node(off);
    const uint64_t st = n->state.load();
    if (!GeometryOk(n->geom)) {
      return "value node of key " + std::to_string(k) + " has no known type or capacity";
    }
    if (!values_->IsAllocated(off, NodeBytes(n->geom))) {
      return "value node of key " + std::to_string(k) + " not allocated";
    }
    if (n->key.load() != k || NodeCount(st) > NodeCapacity(n->geom)) {
      return "value node of key " + std::to_string(k) + " names another key or overflows";
    }
    if (steps > 0 && NodeCount(st) == 0) return "empty value node after the head";
    *pairs += NodeCount(st);
    off = NodeNext(st);
  }
  return "";
}

}  // namespace pmhash::pea
