#include "pm/record_heap.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

namespace pmhash::pm {

RecordHeap::RecordHeap(char* base, ChunkAllocator* chunks, EpochManager* epoch)
    : base_(base),
      chunks_(chunks),
      epoch_(epoch),
      heap_offset_(chunks->heap_offset()),
      heap_end_(chunks->heap_offset() + chunks->chunk_count() * chunks->chunk_size()),
      chunk_size_(chunks->chunk_size()) {
  if (chunk_size_ < kSlabTargetBytes) {
    slab_chunks_ = std::bit_ceil((kSlabTargetBytes + chunk_size_ - 1) / chunk_size_);
  }
  slab_bytes_ = uint64_t{slab_chunks_} * chunk_size_;
  slab_shift_ = static_cast<uint32_t>(std::countr_zero(slab_bytes_));
  nslabs_ = chunks->chunk_count() / slab_chunks_;
  for (size_t c = 0; c < slots_.size() && slab_bytes_ > kSlabHeaderBytes; c++) {
    slots_[c] = static_cast<uint32_t>((slab_bytes_ - kSlabHeaderBytes) / kClassBytes[c]);
  }
  if (nslabs_ > 0 && slab_bytes_ > kSlabHeaderBytes) {
    while (nclasses_ < kClassBytes.size() && kClassBytes[nclasses_] < chunk_size_ &&
           SlotsOf(nclasses_) >= kMinSlotsPerSlab) {
      nclasses_++;
    }
  }
  const uint32_t lookup = nclasses_ ? kClassBytes[nclasses_ - 1] / 16 + 1 : 1;
  class_of_ = std::make_unique<uint8_t[]>(lookup);
  uint32_t c = 0;
  for (uint32_t i = 0; i < lookup && nclasses_; i++) {
    while (kClassBytes[c] < i * 16) c++;
    class_of_[i] = static_cast<uint8_t>(c);
  }
  table_ = std::make_unique<std::atomic<Slab*>[]>(nslabs_);
  bins_ = std::make_unique<Bin[]>(BinCount());
}

RecordHeap::~RecordHeap() { DeleteAllSlabs(); }

void RecordHeap::DeleteAllSlabs() {
  if (slabs_.load(std::memory_order_relaxed) == 0) return;  // (an open's Reset of a new heap)
  for (uint64_t i = 0; i < nslabs_; i++) delete table_[i].exchange(nullptr);
}

uint32_t RecordHeap::ClassOf(uint64_t bytes) const {
  if (nclasses_ == 0 || bytes > kClassBytes[nclasses_ - 1]) return kLarge;
  return class_of_[(bytes + 15) / 16];
}

uint64_t RecordHeap::SpaceFor(uint64_t bytes) const {
  const uint32_t c = ClassOf(bytes);
  if (c != kLarge) return kClassBytes[c];
  return (bytes + chunk_size_ - 1) / chunk_size_ * chunk_size_;
}

bool RecordHeap::Contains(uint64_t offset, uint64_t len) const {
  return offset >= heap_offset_ && offset <= heap_end_ && len <= heap_end_ - offset;
}

RecordHeap::Slab* RecordHeap::MakeSlab(uint64_t slab, uint32_t c, uint32_t stripe) const {
  auto* s = new Slab;
  s->offset = slab;
  s->cls = c;
  s->stripe.store(stripe, std::memory_order_relaxed);
  const uint32_t words = Words(c);
  if (words > kInlineWords) {
    s->big_bits = std::make_unique<uint64_t[]>(words);
    s->bits = s->big_bits.get();
  }
  if (const uint32_t tail = SlotsOf(c) % 64) s->bits[words - 1] = ~uint64_t{0} << tail;
  return s;
}

void RecordHeap::Link(Bin& b, Slab* s) {
  s->prev = nullptr;
  s->next = b.free_list;
  if (b.free_list) b.free_list->prev = s;
  b.free_list = s;
  s->listed = true;
}

void RecordHeap::Unlink(Bin& b, Slab* s) {
  if (s->prev) {
    s->prev->next = s->next;
  } else {
    b.free_list = s->next;
  }
  if (s->next) s->next->prev = s->prev;
  s->prev = s->next = nullptr;
  s->listed = false;
}

Result<uint64_t> RecordHeap::AllocateChunks(uint64_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("record heap: a record of 0 bytes");
  const uint64_t n = (bytes + chunk_size_ - 1) / chunk_size_;
  if (n > chunks_->chunk_count()) {
    return Status::OutOfSpace("record heap: a record of " + std::to_string(bytes) +
                              " B is larger than the heap");
  }
  auto off = chunks_->Allocate(static_cast<uint32_t>(n));
  if (!off.ok()) return off.status();
  if (chunk_hook_) chunk_hook_(off.value(), n);
  large_records_.fetch_add(1, std::memory_order_relaxed);
  large_chunks_.fetch_add(n, std::memory_order_relaxed);
  return off.value();
}

uint64_t RecordHeap::TakeSlot(uint32_t c, uint32_t stripe) {
  Bin& b = BinOf(c, stripe);
  LockGuard<SpinLock> g(b.mu);
  if (b.free_list == nullptr && stripe != kOrphan) {
    // Adopt a slab that recovery rebuilt (lock order: a stripe's bin, then the orphan bin).
    Bin& o = BinOf(c, kOrphan);
    LockGuard<SpinLock> go(o.mu);
    if (Slab* s = o.free_list) {
      Unlink(o, s);
      s->stripe.store(stripe, std::memory_order_release);
      Link(b, s);
    }
  }
  if (b.free_list == nullptr) return 0;
  return TakeSlotLocked(b, b.free_list);
}

uint64_t RecordHeap::TakeSlotLocked(Bin& b, Slab* s) {
  const uint32_t words = Words(s->cls);
  uint32_t k = 0;
  for (uint32_t w = 0; w < words; w++) {
    if (s->bits[w] != ~uint64_t{0}) {
      const int bit = std::countr_one(s->bits[w]);
      s->bits[w] |= uint64_t{1} << bit;
      k = w * 64 + static_cast<uint32_t>(bit);
      break;
    }
  }
  if (s->used == 0) empty_slabs_.fetch_sub(1, std::memory_order_relaxed);
  s->used++;
  if (k < s->high) {
    reused_slots_.fetch_add(1, std::memory_order_relaxed);
  } else {
    s->high = k + 1;
  }
  if (s->used == SlotsOf(s->cls)) Unlink(b, s);
  slab_records_.fetch_add(1, std::memory_order_relaxed);
  return s->offset + kSlabHeaderBytes + uint64_t{k} * kClassBytes[s->cls];
}

Result<uint64_t> RecordHeap::NewSlab(uint32_t c, uint64_t* slot) {
  auto off = chunks_->AllocateAligned(slab_chunks_);
  if (!off.ok()) {
    if (!off.status().IsOutOfSpace()) return off.status();
    // No room for a slab: any bin's free slot of this class will do.
    for (uint32_t s = 0; s < kBinsPerClass; s++) {
      if ((*slot = TakeSlot(c, s)) != 0) return uint64_t{0};
    }
    return Status::OutOfSpace("record heap: no free " + std::to_string(kClassBytes[c]) +
                              " B slot and no room for a slab (" +
                              std::string(off.status().message()) + ")");
  }
  if (chunk_hook_) chunk_hook_(off.value(), slab_chunks_);
  SlabHeader h;
  std::memset(&h, 0, sizeof(h));
  h.magic = kSlabMagic;
  h.slot_bytes = kClassBytes[c];
  h.slots = SlotsOf(c);
  h.slab_bytes = static_cast<uint32_t>(slab_bytes_);
  h.self = off.value();
  std::memcpy(base_ + off.value(), &h, sizeof(h));
  return off.value();
}

uint64_t RecordHeap::PublishSlab(uint64_t slab, uint32_t c, uint32_t stripe) {
  Slab* s = MakeSlab(slab, c, stripe);
  s->bits[0] |= 1;  // slot 0 is the caller's
  s->used = 1;
  s->high = 1;
  slabs_.fetch_add(1, std::memory_order_relaxed);
  slab_records_.fetch_add(1, std::memory_order_relaxed);
  Bin& b = BinOf(c, stripe);
  LockGuard<SpinLock> g(b.mu);
  table_[SlabIndex(slab)].store(s, std::memory_order_release);
  if (SlotsOf(c) > 1) Link(b, s);
  return slab + kSlabHeaderBytes;
}

void RecordHeap::Free(uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return;
  const uint32_t c = ClassOf(bytes);
  if (c == kLarge) {
    const uint64_t n = (bytes + chunk_size_ - 1) / chunk_size_;
    if (n > chunks_->chunk_count() || !chunks_->ValidChunk(offset, static_cast<uint32_t>(n)) ||
        !chunks_->RangeUsed(offset, static_cast<uint32_t>(n))) {
      return;
    }
    chunks_->Free(offset, static_cast<uint32_t>(n));
    large_records_.fetch_sub(1, std::memory_order_relaxed);
    large_chunks_.fetch_sub(n, std::memory_order_relaxed);
    return;
  }
  if (!Contains(offset, 1)) return;
  const uint64_t idx = SlabIndex(offset);
  if (idx >= nslabs_) return;
  // The slab cannot go away under us: this record's slot keeps it alive (used > 0).
  Slab* s = table_[idx].load(std::memory_order_acquire);
  if (s == nullptr || s->cls != c || offset < s->offset + kSlabHeaderBytes) return;
  const uint64_t k = (offset - s->offset - kSlabHeaderBytes) / kClassBytes[c];
  if (k >= SlotsOf(c)) return;
  // Lock the slab's bin; an adoption may move the slab between our read and the lock.
  Bin* b = nullptr;
  uint32_t stripe = 0;
  for (;;) {
    stripe = s->stripe.load(std::memory_order_acquire);
    b = &BinOf(c, stripe);
    b->mu.lock();
    if (s->stripe.load(std::memory_order_relaxed) == stripe) break;
    b->mu.unlock();
  }
  Slab* dead = nullptr;
  uint64_t& w = s->bits[k / 64];
  const uint64_t bit = uint64_t{1} << (k % 64);
  if ((w & bit) == 0) {  // not allocated: a double free is ignored
    b->mu.unlock();
    return;
  }
  w &= ~bit;
  s->used--;
  slab_records_.fetch_sub(1, std::memory_order_relaxed);
  if (!s->listed) Link(*b, s);
  if (s->used == 0) {
    if (stripe == kOrphan || b->free_list != s || s->next != nullptr) {
      // H4: an orphan, or its bin has another slab with room: back to the chunk heap.
      Unlink(*b, s);
      table_[idx].store(nullptr, std::memory_order_relaxed);
      dead = s;
    } else {
      empty_slabs_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  b->mu.unlock();
  if (dead) {
    chunks_->Free(dead->offset, slab_chunks_);
    slabs_.fetch_sub(1, std::memory_order_relaxed);
    delete dead;
  }
}

void RecordHeap::Retire(uint64_t offset, uint64_t bytes) {
  epoch_->Retire(
      [](void* heap, uint64_t off, uint64_t n) { static_cast<RecordHeap*>(heap)->Free(off, n); },
      this, offset, bytes);
}

void RecordHeap::Reset() {
  DeleteAllSlabs();
  for (uint32_t i = 0; i < BinCount(); i++) {
    LockGuard<SpinLock> g(bins_[i].mu);
    bins_[i].free_list = nullptr;
  }
  slabs_.store(0, std::memory_order_relaxed);
  empty_slabs_.store(0, std::memory_order_relaxed);
  slab_records_.store(0, std::memory_order_relaxed);
  large_records_.store(0, std::memory_order_relaxed);
  large_chunks_.store(0, std::memory_order_relaxed);
  reused_slots_.store(0, std::memory_order_relaxed);
  lazy_mark_ = nullptr;
  lazy_records_ = 0;
}

void RecordHeap::EndLazyRecovery(uint64_t bound) {
  const uint64_t end = bound <= heap_offset_ ? 0 : std::min(nslabs_, SlabIndex(bound - 1) + 1);
  for (uint64_t i = 0; i < end; i++) {
    Slab* s = table_[i].load(std::memory_order_relaxed);
    if (s == nullptr || s->stripe.load(std::memory_order_relaxed) != kOrphan) continue;
    if (s->used == SlotsOf(s->cls)) continue;
    Bin& b = BinOf(s->cls, kOrphan);
    LockGuard<SpinLock> g(b.mu);
    Link(b, s);
  }
  slab_records_.fetch_add(lazy_records_, std::memory_order_relaxed);
  lazy_records_ = 0;
  lazy_mark_ = nullptr;
}

Status RecordHeap::MarkReachable(uint64_t offset, uint64_t bytes) {
  auto bad = [&](const std::string& why) {
    return Status::Corruption("record at offset " + std::to_string(offset) + " (" +
                              std::to_string(bytes) + " B): " + why);
  };
  if (bytes == 0) return bad("zero length");
  const uint32_t c = ClassOf(bytes);
  if (c == kLarge) {
    const uint64_t n = (bytes + chunk_size_ - 1) / chunk_size_;
    if (n > chunks_->chunk_count()) return bad("longer than the heap");
    // Refuses an offset outside the heap, not chunk-aligned, or whose chunks are taken.
    if (Status st = MarkChunks(offset, static_cast<uint32_t>(n)); !st.ok()) {
      return bad(std::string(st.message()));
    }
    large_records_.fetch_add(1, std::memory_order_relaxed);
    large_chunks_.fetch_add(n, std::memory_order_relaxed);
    return Status::OK();
  }
  if (!Contains(offset, 1)) return bad("outside the heap");
  const uint64_t idx = SlabIndex(offset);
  if (idx >= nslabs_) return bad("past the last slab of the heap");
  const uint64_t slab = heap_offset_ + idx * slab_bytes_;
  const uint64_t in = offset - slab;
  const uint32_t cb = kClassBytes[c];
  // (32-bit: `in` is below the slab's size; a 64-bit division costs several times more)
  const auto rel = static_cast<uint32_t>(in - kSlabHeaderBytes);
  const uint32_t k = rel / cb;
  if (in < kSlabHeaderBytes || rel != k * cb) {
    return bad("not on a slot boundary of its size class (" + std::to_string(cb) + " B)");
  }
  if (k >= SlotsOf(c)) return bad("past the last slot of its slab");
  Slab* s = table_[idx].load(std::memory_order_relaxed);
  if (s == nullptr) {
    // First record of this slab: its header must be the one Allocate persisted (H1, H2).
    SlabHeader h;
    std::memcpy(&h, base_ + slab, sizeof(h));
    const std::string where = "slab at " + std::to_string(slab);
    if (h.magic != kSlabMagic) return bad(where + " has no slab header");
    if (h.slot_bytes != cb) {
      return bad(where + " holds slots of " + std::to_string(h.slot_bytes) +
                 " B, the record's size class is " + std::to_string(cb) + " B");
    }
    const bool reserved_zero =
        std::all_of(std::begin(h.reserved), std::end(h.reserved), [](uint8_t x) { return x == 0; });
    if (h.slots != SlotsOf(c) || h.slab_bytes != slab_bytes_ || h.self != slab || !reserved_zero) {
      return bad(where + " has an inconsistent header");
    }
    if (Status st = MarkChunks(slab, slab_chunks_); !st.ok()) {
      return bad(where + ": " + std::string(st.message()));  // shared with another owner
    }
    s = MakeSlab(slab, c, kOrphan);  // adopted by the first stripe that needs a slab
    table_[idx].store(s, std::memory_order_relaxed);
    slabs_.fetch_add(1, std::memory_order_relaxed);
    if (!lazy_mark_) {  // (lazy: binned by EndLazyRecovery)
      Bin& b = BinOf(c, kOrphan);
      LockGuard<SpinLock> g(b.mu);
      Link(b, s);
    }
  } else if (s->cls != c) {
    return bad("in a slab of " + std::to_string(kClassBytes[s->cls]) + " B slots");
  }
  // No bin lock and no atomic add (quiescence, REQUIRES): a locked instruction per record
  // would also hold back the loads the recovery walk has prefetched behind it.
  uint64_t& w = s->bits[k / 64];
  const uint64_t bit = uint64_t{1} << (k % 64);
  if (w & bit) return bad("reachable twice");
  w |= bit;
  s->used++;
  s->high = std::max<uint32_t>(s->high, k + 1);
  if (lazy_mark_) {  // (writers add to slab_records_ meanwhile; the slab is in no bin)
    lazy_records_++;
    return Status::OK();
  }
  slab_records_.store(slab_records_.load(std::memory_order_relaxed) + 1,
                      std::memory_order_relaxed);
  if (s->used == SlotsOf(c)) Unlink(BinOf(c, s->stripe.load(std::memory_order_relaxed)), s);
  return Status::OK();
}

void RecordHeap::ReleaseEmptySlabs() {
  for (uint64_t i = 0; i < nslabs_ && empty_slabs_.load(std::memory_order_relaxed) != 0; i++) {
    Slab* s = table_[i].load(std::memory_order_relaxed);
    if (s == nullptr || s->used != 0) continue;
    {
      Bin& b = BinOf(s->cls, s->stripe.load(std::memory_order_relaxed));
      LockGuard<SpinLock> g(b.mu);
      if (s->listed) Unlink(b, s);
    }
    table_[i].store(nullptr, std::memory_order_relaxed);
    chunks_->Free(s->offset, slab_chunks_);
    slabs_.fetch_sub(1, std::memory_order_relaxed);
    empty_slabs_.fetch_sub(1, std::memory_order_relaxed);
    delete s;
  }
}

void RecordHeap::SaveState(StateWriter& w) const {
  w.Put<uint64_t>(slabs_.load(std::memory_order_relaxed));
  w.Put<uint64_t>(large_records_.load(std::memory_order_relaxed));
  w.Put<uint64_t>(large_chunks_.load(std::memory_order_relaxed));
  for (uint64_t i = 0; i < nslabs_; i++) {
    const Slab* s = table_[i].load(std::memory_order_relaxed);
    if (s == nullptr) continue;
    w.Put<uint64_t>(s->offset);
    w.Put<uint64_t>(s->cls);
    Bin& b = BinOf(s->cls, s->stripe.load(std::memory_order_relaxed));
    LockGuard<SpinLock> g(b.mu);
    w.Put(s->bits, uint64_t{Words(s->cls)} * sizeof(uint64_t));
  }
}

bool RecordHeap::LoadState(StateReader& r, const std::function<bool(uint64_t, uint32_t)>& name) {
  uint64_t slabs = 0, large_records = 0, large = 0;
  if (!r.Get(&slabs) || !r.Get(&large_records) || !r.Get(&large) || slabs > nslabs_ ||
      large > chunks_->chunk_count() || large_records > large) {
    return false;
  }
  for (uint64_t n = 0; n < slabs; n++) {
    uint64_t off = 0, cls = 0;
    if (!r.Get(&off) || !r.Get(&cls) || cls >= nclasses_ || !Contains(off, slab_bytes_) ||
        (off - heap_offset_) % slab_bytes_ != 0) {
      return false;
    }
    const uint64_t idx = SlabIndex(off);
    const uint32_t c = static_cast<uint32_t>(cls);
    if (idx >= nslabs_ || table_[idx].load(std::memory_order_relaxed) != nullptr ||
        !name(off, slab_chunks_)) {
      return false;
    }
    Slab* s = MakeSlab(off, c, kOrphan);  // adopted by the first stripe that needs a slab
    table_[idx].store(s, std::memory_order_relaxed);  // (Reset() deletes it if the load fails)
    slabs_.fetch_add(1, std::memory_order_relaxed);
    const uint32_t words = Words(c), slots = SlotsOf(c);
    const uint64_t padding = slots % 64 ? ~uint64_t{0} << (slots % 64) : 0;  // (as MakeSlab)
    if (!r.Get(s->bits, uint64_t{words} * sizeof(uint64_t)) ||
        (s->bits[words - 1] & padding) != padding) {
      return false;
    }
    uint32_t used = 0;
    for (uint32_t w = 0; w < words; w++) {
      const uint64_t in_use = w + 1 == words ? s->bits[w] & ~padding : s->bits[w];
      used += static_cast<uint32_t>(std::popcount(in_use));
      if (in_use != 0) s->high = w * 64 + 64 - static_cast<uint32_t>(std::countl_zero(in_use));
    }
    if (used == 0) return false;  // (H4: Close released every empty slab)
    s->used = used;
    slab_records_.fetch_add(used, std::memory_order_relaxed);
    if (used < slots) {
      Bin& b = BinOf(c, kOrphan);
      LockGuard<SpinLock> g(b.mu);
      Link(b, s);
    }
  }
  large_records_.store(large_records, std::memory_order_relaxed);
  large_chunks_.store(large, std::memory_order_relaxed);
  return true;
}

bool RecordHeap::IsAllocated(uint64_t offset, uint64_t bytes) const {
  if (bytes == 0) return false;
  const uint32_t c = ClassOf(bytes);
  if (c == kLarge) {
    const uint64_t n = (bytes + chunk_size_ - 1) / chunk_size_;
    if (n > chunks_->chunk_count() || !chunks_->ValidChunk(offset, static_cast<uint32_t>(n))) {
      return false;
    }
    for (uint64_t i = 0; i < n; i++) {
      if (!chunks_->IsUsed(offset + i * chunk_size_)) return false;
    }
    return true;
  }
  if (!Contains(offset, 1) || SlabIndex(offset) >= nslabs_) return false;
  const Slab* s = table_[SlabIndex(offset)].load(std::memory_order_acquire);
  if (s == nullptr || s->cls != c || offset < s->offset + kSlabHeaderBytes) return false;
  const uint64_t rel = offset - s->offset - kSlabHeaderBytes;
  if (rel % kClassBytes[c] != 0 || rel / kClassBytes[c] >= SlotsOf(c)) return false;
  const uint64_t k = rel / kClassBytes[c];
  Bin& b = BinOf(c, s->stripe.load(std::memory_order_relaxed));
  LockGuard<SpinLock> g(b.mu);
  return (s->bits[k / 64] >> (k % 64)) & 1;
}

uint64_t RecordHeap::SlabOf(uint64_t offset, uint64_t bytes) const {
  if (ClassOf(bytes) == kLarge || !Contains(offset, 1)) return 0;
  return heap_offset_ + SlabIndex(offset) * slab_bytes_;
}

Status RecordHeap::Check() const {
  auto fail = [](const std::string& what) {
    return Status::Corruption("record heap invariant: " + what);
  };
  uint64_t slabs = 0, empties = 0, records = 0, listed = 0;
  const uint32_t nbins = BinCount();
  std::vector<uint32_t> empty_in_bin(nbins, 0);
  for (uint64_t i = 0; i < nslabs_; i++) {
    const Slab* s = table_[i].load(std::memory_order_acquire);
    if (s == nullptr) continue;
    const std::string where = "slab at " + std::to_string(s->offset);
    if (s->offset != heap_offset_ + i * slab_bytes_) return fail(where + ": wrong position");
    const uint32_t stripe = s->stripe.load(std::memory_order_relaxed);
    if (s->cls >= nclasses_ || stripe > kOrphan) return fail(where + ": bad class/stripe");
    SlabHeader h;
    std::memcpy(&h, base_ + s->offset, sizeof(h));
    if (h.magic != kSlabMagic || h.slot_bytes != kClassBytes[s->cls] || h.self != s->offset) {
      return fail(where + ": PM header does not match");
    }
    for (uint32_t j = 0; j < slab_chunks_; j++) {
      if (!chunks_->IsUsed(s->offset + uint64_t{j} * chunk_size_)) {
        return fail(where + ": chunk not allocated");
      }
    }
    Bin& b = BinOf(s->cls, stripe);
    LockGuard<SpinLock> g(b.mu);
    const uint32_t slots = SlotsOf(s->cls), words = Words(s->cls);
    uint64_t set = 0;
    for (uint32_t w = 0; w < words; w++) set += static_cast<uint64_t>(std::popcount(s->bits[w]));
    set -= uint64_t{words} * 64 - slots;  // the padding bits past the last slot
    if (set != s->used || s->used > slots) return fail(where + ": bitmap != used count");
    if (s->listed != (s->used < slots)) return fail(where + ": free-list membership");
    if (s->used == 0) {
      empties++;
      if (stripe == kOrphan) return fail(where + ": an empty orphan (H4)");
      if (++empty_in_bin[s->cls * kBinsPerClass + stripe] > 1) {
        return fail(where + ": a second empty slab in its bin (H4)");
      }
    }
    slabs++;
    records += s->used;
    listed += s->listed;
  }
  uint64_t on_lists = 0;
  for (uint32_t i = 0; i < nbins; i++) {
    LockGuard<SpinLock> g(bins_[i].mu);
    const Slab* prev = nullptr;
    for (const Slab* s = bins_[i].free_list; s; s = s->next) {
      if (s->prev != prev || !s->listed ||
          s->cls * kBinsPerClass + s->stripe.load(std::memory_order_relaxed) != i) {
        return fail("free list of bin " + std::to_string(i) + " is inconsistent");
      }
      if (++on_lists > slabs) return fail("free list cycle");
      prev = s;
    }
  }
  if (on_lists != listed) return fail("slabs with a free slot != slabs on free lists");
  if (slabs != slabs_.load(std::memory_order_relaxed) ||
      empties != empty_slabs_.load(std::memory_order_relaxed) ||
      records != slab_records_.load(std::memory_order_relaxed)) {
    return fail("counters differ from the slab table");
  }
  return Status::OK();
}

RecordHeapStats RecordHeap::stats() const {
  RecordHeapStats st;
  st.slabs = slabs_.load(std::memory_order_relaxed);
  st.empty_slabs = empty_slabs_.load(std::memory_order_relaxed);
  st.slab_records = slab_records_.load(std::memory_order_relaxed);
  st.large_records = large_records_.load(std::memory_order_relaxed);
  st.large_chunks = large_chunks_.load(std::memory_order_relaxed);
  st.chunks = st.slabs * slab_chunks_ + st.large_chunks;
  st.bytes = st.chunks * chunk_size_;
  st.reused_slots = reused_slots_.load(std::memory_order_relaxed);
  return st;
}

uint64_t RecordHeap::dram_bytes() const {
  // Upper bound for the descriptors: every slab sized for the class with the most slots (whose
  // bitmap is inline up to kInlineWords words).
  const uint64_t words = nclasses_ ? Words(0) : 0;
  const uint64_t per_slab = sizeof(Slab) + (words > kInlineWords ? words * 8 : 0);
  return nslabs_ * sizeof(std::atomic<Slab*>) +
         uint64_t{BinCount()} * sizeof(Bin) +
         slabs_.load(std::memory_order_relaxed) * per_slab;
}

}  // namespace pmhash::pm
