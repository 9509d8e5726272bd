// tests/record_heap_test.cc — pm::RecordHeap (src/pm/record_heap.h) on a DRAM heap image:
// geometry and size classes, allocation/free/reuse at every class boundary, large records, out
// of space, recovery by reachability (unpublished records and empty slabs come back), hostile
// inputs at recovery (kCorruption, never a crash: the asan configuration runs these), the slab
// header's persist as the crash simulator sees it, a tiny index over the heap crashed at every
// fence, and many threads allocating at once (*Concurrent*: TSan).
#include "pm/record_heap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/epoch.h"
#include "pm/chunk_allocator.h"
#include "pm/counters.h"
#include "pm/crash_sim.h"
#include "pm/persist.h"
#include "pm/saved_state.h"
#include "test_util.h"

namespace pmhash::testing {
namespace {

using pm::kSlabHeaderBytes;
using pm::RecordHeap;
using pm::SlabHeader;

constexpr uint64_t kHeapOffset = 4096;

// A pool image in DRAM: [4 KiB "header" | chunk heap], a chunk allocator and a record heap.
struct Heap {
  explicit Heap(uint64_t chunks, uint32_t chunk_size = 256, uint8_t fill = 0)
      : bytes(kHeapOffset + chunks * chunk_size),
        mem(static_cast<char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096))),
        alloc(kHeapOffset, chunk_size, chunks),
        persist(&counters) {
    std::memset(mem.get(), fill, bytes);
    heap = std::make_unique<RecordHeap>(mem.get(), &alloc, &epoch);
  }
  ~Heap() {
    epoch.Drain();
    heap.reset();
  }
  struct FreeDeleter {
    void operator()(char* p) const { std::free(p); }
  };

  Result<uint64_t> Alloc(uint64_t n) { return heap->Allocate(n, persist); }
  // Allocates and fills a record with a pattern derived from its offset.
  uint64_t AllocFilled(uint64_t n) {
    auto r = Alloc(n);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return 0;
    Fill(r.value(), n);
    return r.value();
  }
  void Fill(uint64_t off, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) mem.get()[off + i] = static_cast<char>((off * 31 + i) & 0xFF);
  }
  bool Intact(uint64_t off, uint64_t n) const {
    for (uint64_t i = 0; i < n; i++) {
      if (mem.get()[off + i] != static_cast<char>((off * 31 + i) & 0xFF)) return false;
    }
    return true;
  }
  // What a crash + reopen does: DRAM state forgotten, then the index marks what it reaches.
  void Crash() {
    alloc.Reset();
    heap->Reset();
  }
  SlabHeader* Header(uint64_t slab) { return reinterpret_cast<SlabHeader*>(mem.get() + slab); }

  uint64_t bytes;
  std::unique_ptr<char, FreeDeleter> mem;
  pm::ChunkAllocator alloc;
  EpochManager epoch;
  pm::TrafficCounters counters;
  pm::Persister<pm::Dram> persist;
  std::unique_ptr<RecordHeap> heap;
};

// ============================================================================================
// Geometry
// ============================================================================================

TEST(RecordHeap, GeometryOf256ByteChunks) {
  Heap h(1024);
  const RecordHeap& r = *h.heap;
  EXPECT_EQ(r.slab_bytes(), 4096u);
  EXPECT_EQ(r.slab_chunks(), 16u);
  // Classes below a chunk with at least 8 slots per slab: 16 .. 224.
  ASSERT_EQ(r.class_count(), 11u);
  EXPECT_EQ(r.max_slot_bytes(), 224u);
  const uint32_t expect_slots[] = {252, 126, 84, 63, 50, 42, 36, 31, 25, 21, 18};
  for (uint32_t c = 0; c < r.class_count(); c++) {
    EXPECT_EQ(r.slots_per_slab(c), expect_slots[c]) << "class " << r.class_bytes(c);
    EXPECT_EQ(r.slots_per_slab(c), (4096 - kSlabHeaderBytes) / r.class_bytes(c));
  }
  // The class of a length: the smallest class that holds it; 16 B at least.
  EXPECT_EQ(r.class_bytes(r.ClassOf(1)), 16u);
  EXPECT_EQ(r.class_bytes(r.ClassOf(16)), 16u);
  EXPECT_EQ(r.class_bytes(r.ClassOf(17)), 32u);
  EXPECT_EQ(r.class_bytes(r.ClassOf(24)), 32u) << "8 B header + 8 B key + 8 B value";
  EXPECT_EQ(r.class_bytes(r.ClassOf(129)), 160u);
  EXPECT_EQ(r.class_bytes(r.ClassOf(224)), 224u);
  EXPECT_EQ(r.ClassOf(225), RecordHeap::kLarge);
  EXPECT_EQ(r.SpaceFor(24), 32u);
  EXPECT_EQ(r.SpaceFor(225), 256u);
  EXPECT_EQ(r.SpaceFor(1000), 1024u);
  EXPECT_FALSE(r.PlausibleRecord(kHeapOffset - 16, 8)) << "before the heap";
  EXPECT_FALSE(r.PlausibleRecord(h.bytes - 8, 16)) << "runs past the heap";
  EXPECT_FALSE(r.PlausibleRecord(~uint64_t{0} - 15, 8)) << "no overflow";
  EXPECT_TRUE(r.PlausibleRecord(h.bytes - 16, 16));
}

TEST(RecordHeap, GeometryOfOtherChunkSizes) {
  {
    Heap h(256, 64);  // tiny chunks: a slab is 64 of them; only classes below 64 B
    EXPECT_EQ(h.heap->slab_chunks(), 64u);
    EXPECT_EQ(h.heap->max_slot_bytes(), 48u);
    EXPECT_EQ(h.heap->ClassOf(49), RecordHeap::kLarge);
  }
  {
    Heap h(16, 16384);  // Pea-sized chunks: a slab is one chunk; classes up to 1792 B
    EXPECT_EQ(h.heap->slab_chunks(), 1u);
    EXPECT_EQ(h.heap->slab_bytes(), 16384u);
    EXPECT_EQ(h.heap->max_slot_bytes(), 1792u);
    auto a = h.Alloc(24);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a.value(), kHeapOffset + kSlabHeaderBytes);
  }
  {
    Heap h(2, 512 << 10);  // Pea's default segments: classes up to 56 KiB (8 slots per slab)
    EXPECT_EQ(h.heap->slab_chunks(), 1u);
    EXPECT_EQ(h.heap->max_slot_bytes(), 57344u);
    EXPECT_EQ(h.heap->SpaceFor(3000), 3072u);
    EXPECT_EQ(h.heap->ClassOf(57345), RecordHeap::kLarge);
  }
  {
    Heap h(8);  // a heap smaller than a slab: every record takes whole chunks
    EXPECT_EQ(h.heap->class_count(), 0u);
    auto a = h.Alloc(24);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ((a.value() - kHeapOffset) % 256, 0u);
    EXPECT_EQ(h.alloc.used_chunks(), 1u);
  }
}

// ============================================================================================
// Allocation, free, reuse
// ============================================================================================

TEST(RecordHeap, EveryClassAtBothBoundaries) {
  Heap h(4096);
  RecordHeap& r = *h.heap;
  std::vector<std::pair<uint64_t, uint64_t>> recs;  // (offset, bytes)
  for (uint32_t c = 0; c < r.class_count(); c++) {
    const uint64_t lo = c == 0 ? 1 : r.class_bytes(c - 1) + 1;
    for (uint64_t n : {lo, uint64_t{r.class_bytes(c)}}) {
      SCOPED_TRACE(n);
      const uint64_t off = h.AllocFilled(n);
      ASSERT_NE(off, 0u);
      const uint64_t slab = r.SlabOf(off, n);
      ASSERT_NE(slab, 0u);
      EXPECT_EQ((slab - kHeapOffset) % r.slab_bytes(), 0u);
      EXPECT_EQ((off - slab - kSlabHeaderBytes) % r.class_bytes(c), 0u) << "slot boundary";
      EXPECT_EQ(off % 16, 0u);
      EXPECT_TRUE(r.PlausibleRecord(off, n));
      EXPECT_FALSE(r.PlausibleRecord(off + 3, n)) << "misaligned";
      EXPECT_EQ(h.Header(slab)->slot_bytes, r.class_bytes(c));
      EXPECT_EQ(h.Header(slab)->magic, pm::kSlabMagic);
      EXPECT_TRUE(r.IsAllocated(off, n));
      recs.emplace_back(off, n);
    }
  }
  // Large records: whole chunks, chunk-aligned.
  for (uint64_t n : {uint64_t{225}, uint64_t{256}, uint64_t{257}, uint64_t{5000}}) {
    const uint64_t off = h.AllocFilled(n);
    ASSERT_NE(off, 0u);
    EXPECT_EQ((off - kHeapOffset) % 256, 0u);
    EXPECT_EQ(r.SlabOf(off, n), 0u);
    recs.emplace_back(off, n);
  }
  for (const auto& [off, n] : recs) EXPECT_TRUE(h.Intact(off, n)) << "records overlap at " << off;
  const pm::RecordHeapStats st = r.stats();
  EXPECT_EQ(st.slabs, r.class_count());
  EXPECT_EQ(st.slab_records, 2u * r.class_count());
  EXPECT_EQ(st.large_records, 4u);
  EXPECT_EQ(st.large_chunks, 1u + 1 + 2 + 20);
  EXPECT_EQ(h.alloc.used_chunks(), st.chunks);
  ASSERT_TRUE(r.Check().ok()) << r.Check().ToString();
  for (const auto& [off, n] : recs) r.Free(off, n);
  // One empty slab per bin is kept (H4); large chunks are back.
  EXPECT_EQ(r.stats().slab_records, 0u);
  EXPECT_EQ(r.stats().large_chunks, 0u);
  EXPECT_EQ(r.stats().empty_slabs, r.stats().slabs);
  EXPECT_EQ(h.alloc.used_chunks(), r.stats().slabs * r.slab_chunks());
  ASSERT_TRUE(r.Check().ok()) << r.Check().ToString();
}

TEST(RecordHeap, FreeAndReuse) {
  Heap h(1024);
  RecordHeap& r = *h.heap;
  const uint32_t per = r.slots_per_slab(r.ClassOf(24));
  ASSERT_EQ(per, 126u);
  std::vector<uint64_t> offs;
  for (uint32_t i = 0; i < 3 * per; i++) offs.push_back(h.AllocFilled(24));
  EXPECT_EQ(r.stats().slabs, 3u);
  EXPECT_EQ(std::set<uint64_t>(offs.begin(), offs.end()).size(), offs.size());
  // Free one slot in the middle: the next allocation takes exactly it.
  r.Free(offs[7], 24);
  EXPECT_FALSE(r.IsAllocated(offs[7], 24));
  EXPECT_EQ(r.stats().reused_slots, 0u);
  auto again = h.Alloc(24);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value(), offs[7]);
  EXPECT_EQ(r.stats().reused_slots, 1u);
  // A second Free of the same slot is harmless.
  r.Free(offs[9], 24);
  r.Free(offs[9], 24);
  EXPECT_EQ(r.stats().slab_records, 3u * per - 1);
  ASSERT_TRUE(r.Check().ok()) << r.Check().ToString();
  // Empty every slab: all but one go back to the chunk allocator.
  for (uint32_t i = 0; i < offs.size(); i++) {
    if (i != 9) r.Free(offs[i], 24);
  }
  EXPECT_EQ(r.stats().slabs, 1u);
  EXPECT_EQ(r.stats().empty_slabs, 1u);
  EXPECT_EQ(h.alloc.used_chunks(), 16u);
  ASSERT_TRUE(r.Check().ok()) << r.Check().ToString();
  // The kept slab serves the next record; freeing it again keeps it (the last of its bin).
  auto next = h.Alloc(24);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(r.stats().slabs, 1u);
  EXPECT_EQ(r.stats().empty_slabs, 0u);
  r.Free(next.value(), 24);
  EXPECT_EQ(r.stats().slabs, 1u) << "the last slab of its bin stays";
  EXPECT_EQ(r.stats().empty_slabs, 1u);
  // The freed slabs' chunks serve other owners: a run of 32 chunks fits where they were.
  auto run = h.alloc.Allocate(32);
  EXPECT_TRUE(run.ok()) << run.status().ToString();
}

// A large record's Free is ignored unless its chunks are in use: a second Free (or one of an
// offset read from a pool edited after a clean Close) frees nothing and leaves the counts.
TEST(RecordHeap, FreeOfLargeChunksNotInUseIsIgnored) {
  Heap h(256);
  RecordHeap& r = *h.heap;
  const uint64_t big = 1000;  // past every 256 B-chunk class: 4 whole chunks
  ASSERT_EQ(r.ClassOf(big), RecordHeap::kLarge);
  const uint64_t off = h.AllocFilled(big);
  EXPECT_EQ(r.stats().large_records, 1u);
  r.Free(off, big);
  EXPECT_EQ(r.stats().large_records, 0u);
  EXPECT_EQ(h.alloc.used_chunks(), 0u);
  r.Free(off, big);
  EXPECT_EQ(r.stats().large_records, 0u) << "the second Free freed again";
  EXPECT_EQ(r.stats().large_chunks, 0u);
  EXPECT_EQ(h.alloc.used_chunks(), 0u);
}

// Clean shutdown: ReleaseEmptySlabs, SaveState, then (after Reset, as a reopen) LoadState gives
// the same heap: the same records allocated, the same counts, its invariants, every slab named
// once; a section cut short or a slab named twice is refused.
TEST(RecordHeap, SavedStateRoundTrip) {
  Heap h(1024);
  RecordHeap& r = *h.heap;
  std::vector<std::pair<uint64_t, uint64_t>> live;  // (offset, bytes)
  std::vector<uint64_t> emptied;
  for (int i = 0; i < 300; i++) live.emplace_back(h.AllocFilled(24), 24);
  for (int i = 0; i < 40; i++) live.emplace_back(h.AllocFilled(100), 100);
  live.emplace_back(h.AllocFilled(1000), 1000);  // a large record
  for (int i = 0; i < 126; i++) {  // a slab of 32 B slots filled, then emptied
    emptied.push_back(h.AllocFilled(24));
  }
  for (uint64_t off : emptied) r.Free(off, 24);
  for (size_t i = 0; i < live.size(); i += 7) {  // holes
    if (live[i].second == 1000) continue;
    r.Free(live[i].first, live[i].second);
    live[i].second = 0;
  }
  std::erase_if(live, [](const auto& x) { return x.second == 0; });
  r.ReleaseEmptySlabs();
  EXPECT_EQ(r.stats().empty_slabs, 0u);
  ASSERT_TRUE(r.Check().ok()) << r.Check().ToString();
  const pm::RecordHeapStats before = r.stats();
  const uint64_t used = h.alloc.used_chunks();
  pm::StateWriter size;
  r.SaveState(size);
  std::vector<char> image(size.bytes());
  pm::StateWriter w(image.data(), image.size());
  r.SaveState(w);

  auto load = [&](const std::vector<char>& img, pm::ChunkRanges* named) {
    r.Reset();
    pm::StateReader rd(img.data(), img.size());
    return r.LoadState(rd, [named](uint64_t o, uint32_t n) { return named->Add(o, n); }) &&
           rd.remaining() == 0;
  };
  pm::ChunkRanges named(h.alloc);
  ASSERT_TRUE(load(image, &named));
  EXPECT_TRUE(named.Disjoint());
  EXPECT_TRUE(named.AllUsed());
  EXPECT_EQ(named.count() + r.large_chunks(), used);
  const pm::RecordHeapStats after = r.stats();
  EXPECT_EQ(after.slabs, before.slabs);
  EXPECT_EQ(after.slab_records, before.slab_records);
  EXPECT_EQ(after.large_records, before.large_records);
  EXPECT_EQ(after.large_chunks, before.large_chunks);
  ASSERT_TRUE(r.Check().ok()) << r.Check().ToString();
  for (const auto& [off, n] : live) EXPECT_TRUE(r.IsAllocated(off, n)) << off;
  // The loaded slabs are orphans: the next allocations take their free slots first.
  auto next = h.Alloc(24);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(r.stats().reused_slots, 1u);
  EXPECT_EQ(h.alloc.used_chunks(), used) << "a free slot of a loaded slab, not a new slab";

  std::vector<char> cut(image.begin(), image.end() - 8);
  pm::ChunkRanges n1(h.alloc);
  EXPECT_FALSE(load(cut, &n1));
  std::vector<char> twice = image;  // the second slab's offset made the first's
  std::memcpy(twice.data() + 24 + 8 + 8 + 8 * 2, twice.data() + 24, 8);
  pm::ChunkRanges n2(h.alloc);
  EXPECT_FALSE(load(twice, &n2));
  r.Reset();
}

TEST(RecordHeap, RetireWaitsForReaders) {
  Heap h(1024);
  const uint64_t off = h.AllocFilled(40);
  {
    EpochManager::Guard g(h.epoch);
    h.heap->Retire(off, 40);
    h.epoch.Reclaim();
    h.epoch.Reclaim();
    EXPECT_TRUE(h.heap->IsAllocated(off, 40)) << "freed under a reader";
    EXPECT_TRUE(h.Intact(off, 40));
  }
  h.epoch.Drain();
  EXPECT_FALSE(h.heap->IsAllocated(off, 40));
}

TEST(RecordHeap, OutOfSpaceIsAStatusAndChangesNothing) {
  // 2 slabs' worth of chunks + 3: one slab per class fits twice, large records fill the rest.
  Heap h(35);
  RecordHeap& r = *h.heap;
  std::vector<uint64_t> offs;
  for (;;) {
    auto a = h.Alloc(100);  // class 112: 36 slots per slab
    if (!a.ok()) {
      EXPECT_TRUE(a.status().IsOutOfSpace()) << a.status().ToString();
      break;
    }
    offs.push_back(a.value());
    ASSERT_LT(offs.size(), 1000u);
  }
  EXPECT_EQ(offs.size(), 2u * 36);
  const pm::RecordHeapStats before = r.stats();
  const uint64_t used = h.alloc.used_chunks();
  EXPECT_TRUE(h.Alloc(24).status().IsOutOfSpace()) << "no room for a slab of another class";
  EXPECT_TRUE(h.Alloc(1000).status().IsOutOfSpace()) << "4 chunks in a row are not free";
  EXPECT_TRUE(h.Alloc(uint64_t{1} << 40).status().IsOutOfSpace()) << "larger than the heap";
  EXPECT_TRUE(h.Alloc(0).status().IsInvalidArgument());
  EXPECT_EQ(r.stats().slabs, before.slabs);
  EXPECT_EQ(r.stats().slab_records, before.slab_records);
  EXPECT_EQ(h.alloc.used_chunks(), used);
  auto small = h.Alloc(300);  // 2 chunks: fits in the 3 left over
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  r.Free(offs[5], 100);
  auto again = h.Alloc(100);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value(), offs[5]);
  ASSERT_TRUE(r.Check().ok()) << r.Check().ToString();
}

// A full heap still hands out a free slot that another thread's stripe holds.
TEST(RecordHeap, FullHeapUsesOtherStripesSlots) {
  Heap h(16);  // exactly one slab
  uint64_t first = 0;
  std::thread([&] { first = h.AllocFilled(24); }).join();
  ASSERT_NE(first, 0u);
  for (int t = 0; t < 8; t++) {
    std::thread([&] {
      auto a = h.Alloc(24);
      EXPECT_TRUE(a.ok()) << a.status().ToString();
    }).join();
  }
  EXPECT_EQ(h.heap->stats().slabs, 1u);
  EXPECT_EQ(h.heap->stats().slab_records, 9u);
}

// ============================================================================================
// Recovery by reachability
// ============================================================================================

TEST(RecordHeap, RecoveryFreesUnpublishedRecordsAndEmptySlabs) {
  Heap h(2048);
  RecordHeap& r = *h.heap;
  std::mt19937_64 rng(TestSeed(5));
  SCOPED_TRACE(SeedTrace(TestSeed(5)));
  struct Rec {
    uint64_t off, bytes;
    bool published;
  };
  std::vector<Rec> recs;
  // Class 32: a few slabs, some with no published record at all. Class 64: every other
  // published. Class 160: none published (its slab must come back). Large: half.
  for (int i = 0; i < 600; i++) {
    const uint64_t n = 17 + rng() % 16;
    recs.push_back({h.AllocFilled(n), n, (i < 300 && i % 3 == 0)});
  }
  for (int i = 0; i < 100; i++) recs.push_back({h.AllocFilled(64), 64, i % 2 == 0});
  for (int i = 0; i < 10; i++) recs.push_back({h.AllocFilled(150), 150, false});
  for (int i = 0; i < 6; i++) recs.push_back({h.AllocFilled(700), 700, i % 2 == 0});
  h.Crash();
  std::set<uint64_t> slabs;
  uint64_t large_chunks = 0, published = 0;
  for (const Rec& x : recs) {
    if (!x.published) continue;
    ASSERT_TRUE(r.MarkReachable(x.off, x.bytes).ok());
    published++;
    if (const uint64_t s = r.SlabOf(x.off, x.bytes)) {
      slabs.insert(s);
    } else {
      large_chunks += (x.bytes + 255) / 256;
    }
  }
  const pm::RecordHeapStats st = r.stats();
  EXPECT_EQ(st.slabs, slabs.size()) << "slabs without a reachable record are free";
  EXPECT_EQ(st.slab_records + st.large_records, published);
  EXPECT_EQ(h.alloc.used_chunks(), slabs.size() * 16 + large_chunks);
  EXPECT_EQ(st.empty_slabs, 0u);
  ASSERT_TRUE(r.Check().ok()) << r.Check().ToString();
  for (const Rec& x : recs) {
    EXPECT_EQ(r.IsAllocated(x.off, x.bytes), x.published) << x.off;
    if (x.published) {
      EXPECT_TRUE(h.Intact(x.off, x.bytes));
    }
  }
  // Unpublished slots are reused without disturbing published records.
  std::set<uint64_t> taken;
  for (int i = 0; i < 400; i++) taken.insert(h.AllocFilled(24));
  for (const Rec& x : recs) {
    if (x.published) {
      EXPECT_EQ(taken.count(x.off), 0u) << "a published record was handed out again";
      EXPECT_TRUE(h.Intact(x.off, x.bytes));
    }
  }
  EXPECT_GT(r.stats().reused_slots, 0u);
  ASSERT_TRUE(r.Check().ok()) << r.Check().ToString();
}

// A slab's bitmap lives in its DRAM state's first line up to 320 slots (4 KiB slabs), in its own
// array beyond (16 KiB slabs of 16 B records: 1020 slots). Both forms through a recovery: the
// marks are exactly the published records, a slot is refused twice, the free slots are handed
// out again and no published one; PrefetchSlab (the walks' prefetch) takes any offset.
TEST(RecordHeap, RecoveryOfBothBitmapForms) {
  for (const uint32_t chunk : {256u, 16384u}) {
    SCOPED_TRACE(chunk);
    Heap h(chunk == 256 ? 512 : 16, chunk);
    RecordHeap& r = *h.heap;
    ASSERT_EQ(r.slots_per_slab(0) > 320, chunk == 16384);
    const uint64_t n = r.slots_per_slab(0) * 2 + 7;  // two full slabs and part of a third
    std::vector<uint64_t> offs;
    for (uint64_t i = 0; i < n; i++) offs.push_back(h.AllocFilled(16));
    h.Crash();
    for (const uint64_t bogus : {uint64_t{0}, ~uint64_t{0}, h.bytes, kHeapOffset - 16}) {
      r.PrefetchSlab(bogus);
    }
    uint64_t published = 0;
    for (uint64_t i = 0; i < n; i++) {
      r.PrefetchSlab(offs[i]);
      if (i % 3 != 1) continue;
      ASSERT_TRUE(r.MarkReachable(offs[i], 16).ok()) << i;
      published++;
    }
    EXPECT_TRUE(r.MarkReachable(offs[1], 16).IsCorruption()) << "a slot reachable twice";
    EXPECT_EQ(r.stats().slab_records, published);
    ASSERT_TRUE(r.Check().ok()) << r.Check().ToString();
    for (uint64_t i = 0; i < n; i++) EXPECT_EQ(r.IsAllocated(offs[i], 16), i % 3 == 1) << i;
    const uint64_t slabs = r.stats().slabs;
    EXPECT_EQ(slabs, 3u);
    std::set<uint64_t> taken;
    for (uint64_t i = 0; i < n - published; i++) taken.insert(h.AllocFilled(16));
    EXPECT_EQ(r.stats().slabs, slabs) << "the recovered slabs' free slots are used first";
    EXPECT_GT(r.stats().reused_slots, 0u);
    for (uint64_t i = 0; i < n; i++) {
      if (i % 3 != 1) continue;
      EXPECT_EQ(taken.count(offs[i]), 0u) << "published slot " << i << " handed out again";
      EXPECT_TRUE(h.Intact(offs[i], 16)) << i;
    }
    ASSERT_TRUE(r.Check().ok()) << r.Check().ToString();
  }
}

TEST(RecordHeap, RecoveryOfAFullSlabAndAfterSlabReuse) {
  Heap h(64);
  RecordHeap& r = *h.heap;
  // A slab of class 32, completely full and published; then crash and recover it.
  std::vector<uint64_t> offs;
  for (int i = 0; i < 126; i++) offs.push_back(h.AllocFilled(30));
  h.Crash();
  for (uint64_t o : offs) ASSERT_TRUE(r.MarkReachable(o, 30).ok());
  EXPECT_EQ(r.stats().slabs, 1u);
  ASSERT_TRUE(r.Check().ok()) << r.Check().ToString();
  // Full: the next record opens a new slab.
  const uint64_t extra = h.AllocFilled(30);
  EXPECT_NE(r.SlabOf(extra, 30), r.SlabOf(offs[0], 30));
  // Free everything: the first slab goes back, then a slab of another class takes its place
  // and rewrites the header; the old records are unreachable, so a recovery sees only the new.
  for (uint64_t o : offs) r.Free(o, 30);
  r.Free(extra, 30);
  std::vector<uint64_t> big;
  for (int i = 0; i < 40; i++) big.push_back(h.AllocFilled(200));  // 3 slabs of 18
  const bool reused = std::any_of(big.begin(), big.end(), [&](uint64_t o) {
    return r.SlabOf(o, 200) == r.SlabOf(offs[0], 30);
  });
  EXPECT_TRUE(reused) << "the freed slab's chunks were not reused";
  h.Crash();
  for (uint64_t o : big) ASSERT_TRUE(r.MarkReachable(o, 200).ok());
  Status s = r.MarkReachable(offs[0], 30);
  EXPECT_TRUE(s.IsCorruption()) << "a stale pointer into a reused slab: " << s.ToString();
}

// ============================================================================================
// Hostile input at recovery: kCorruption, never a crash or an out-of-bounds read
// ============================================================================================

TEST(RecordHeap, HostileOffsetsAndLengths) {
  struct Case {
    const char* what;
    // Given a heap holding record `rec` (24 B, class 32) and large record `big` (600 B),
    // after the crash: corrupt the image and/or pick what to mark; the last mark must fail.
    std::vector<std::pair<uint64_t, uint64_t>> (*marks)(Heap&, uint64_t rec, uint64_t big);
  };
  const Case cases[] = {
      {"offset before the heap",
       [](Heap&, uint64_t, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{64, 24}};
       }},
      {"offset past the heap",
       [](Heap& h, uint64_t, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{h.bytes + 64, 24}};
       }},
      {"huge offset",
       [](Heap&, uint64_t, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{~uint64_t{0} - 8, 24}};
       }},
      {"offset in a free chunk (no slab header)",
       [](Heap&, uint64_t, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{
             {kHeapOffset + 40 * 4096 + kSlabHeaderBytes, 24}};
       }},
      {"offset in a slab's header",
       [](Heap&, uint64_t rec, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec - kSlabHeaderBytes, 24}};
       }},
      {"misaligned inside a slab",
       [](Heap&, uint64_t rec, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec + 8, 24}};
       }},
      {"on a 16 B boundary that is not a 32 B slot",
       [](Heap&, uint64_t rec, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec + 16, 24}};
       }},
      {"length of another class than the slab's (larger than the slot)",
       [](Heap&, uint64_t rec, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec, 40}};
       }},
      {"length of a smaller class than the slab's",
       [](Heap&, uint64_t rec, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec, 8}};
       }},
      {"zero length",
       [](Heap&, uint64_t rec, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec, 0}};
       }},
      {"slot past the last one of the slab (class 80: 50 slots end at 4064)",
       [](Heap&, uint64_t rec, uint64_t) {
         const uint64_t slab = rec - kSlabHeaderBytes;
         return std::vector<std::pair<uint64_t, uint64_t>>{{slab + kSlabHeaderBytes + 50 * 80, 80}};
       }},
      {"slab header with a bad class",
       [](Heap& h, uint64_t rec, uint64_t) {
         h.Header(rec - kSlabHeaderBytes)->slot_bytes = 17;
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec, 24}};
       }},
      {"slab header naming a larger class",
       [](Heap& h, uint64_t rec, uint64_t) {
         h.Header(rec - kSlabHeaderBytes)->slot_bytes = 48;
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec, 24}};
       }},
      {"slab header with a bad magic",
       [](Heap& h, uint64_t rec, uint64_t) {
         h.Header(rec - kSlabHeaderBytes)->magic ^= 1;
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec, 24}};
       }},
      {"slab header with a wrong slot count",
       [](Heap& h, uint64_t rec, uint64_t) {
         h.Header(rec - kSlabHeaderBytes)->slots = 1u << 30;
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec, 24}};
       }},
      {"slab header with a wrong slab size",
       [](Heap& h, uint64_t rec, uint64_t) {
         h.Header(rec - kSlabHeaderBytes)->slab_bytes = 1u << 20;
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec, 24}};
       }},
      {"slab header copied from elsewhere (self)",
       [](Heap& h, uint64_t rec, uint64_t) {
         h.Header(rec - kSlabHeaderBytes)->self += 4096;
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec, 24}};
       }},
      {"slab header with reserved bytes set",
       [](Heap& h, uint64_t rec, uint64_t) {
         h.Header(rec - kSlabHeaderBytes)->reserved[39] = 1;
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec, 24}};
       }},
      {"record reachable twice",
       [](Heap&, uint64_t rec, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec, 24}, {rec, 24}};
       }},
      {"record reachable twice with two lengths of its class",
       [](Heap&, uint64_t rec, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec, 24}, {rec, 32}};
       }},
      {"slab chunks shared with a large record",
       [](Heap&, uint64_t rec, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec - kSlabHeaderBytes, 600},
                                                           {rec, 24}};
       }},
      {"large record overlapping a slab",
       [](Heap&, uint64_t rec, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{rec, 24},
                                                           {rec - kSlabHeaderBytes + 256, 600}};
       }},
      {"large record not chunk-aligned",
       [](Heap&, uint64_t, uint64_t big) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{big + 16, 600}};
       }},
      {"large record running past the heap",
       [](Heap& h, uint64_t, uint64_t) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{h.bytes - 256, 600}};
       }},
      {"large record longer than the heap",
       [](Heap&, uint64_t, uint64_t big) {
         return std::vector<std::pair<uint64_t, uint64_t>>{{big, uint64_t{1} << 40}};
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Heap h(1024);
    const uint64_t rec = h.AllocFilled(24);
    const uint64_t big = h.AllocFilled(600);
    ASSERT_EQ(rec, kHeapOffset + kSlabHeaderBytes);
    h.Crash();
    const auto marks = c.marks(h, rec, big);
    for (size_t i = 0; i + 1 < marks.size(); i++) {
      ASSERT_TRUE(h.heap->MarkReachable(marks[i].first, marks[i].second).ok());
    }
    Status s = h.heap->MarkReachable(marks.back().first, marks.back().second);
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_FALSE(s.message().empty());
  }
}

// Random offsets, lengths and slab headers over a heap full of random bytes: every answer is OK
// or kCorruption, the heap's invariants hold after the OK ones (ASan: no out-of-bounds read).
TEST(RecordHeap, RandomHostileImages) {
  const uint64_t seed = TestSeed(99);
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 40; round++) {
    Heap h(256, 256, static_cast<uint8_t>(rng()));
    // Some plausible slab headers among the noise.
    for (int i = 0; i < 8; i++) {
      const uint64_t slab = kHeapOffset + (rng() % 16) * 4096;
      SlabHeader* hd = h.Header(slab);
      std::memset(hd, 0, sizeof(*hd));
      hd->magic = pm::kSlabMagic;
      const uint32_t c = static_cast<uint32_t>(rng() % h.heap->class_count());
      hd->slot_bytes = rng() % 4 ? h.heap->class_bytes(c) : static_cast<uint32_t>(rng());
      hd->slots = rng() % 4 ? h.heap->slots_per_slab(c) : static_cast<uint32_t>(rng());
      hd->slab_bytes = 4096;
      hd->self = rng() % 4 ? slab : rng();
    }
    h.Crash();
    uint64_t ok = 0;
    for (int i = 0; i < 400; i++) {
      uint64_t off = kHeapOffset + rng() % (h.bytes - kHeapOffset + 512);
      if (rng() % 2) off = off / 16 * 16;
      if (rng() % 8 == 0) off = rng();
      uint64_t bytes = 1 + rng() % 300;
      if (rng() % 16 == 0) bytes = rng();
      Status s = h.heap->MarkReachable(off, bytes);
      ASSERT_TRUE(s.ok() || s.IsCorruption()) << s.ToString();
      ok += s.ok();
    }
    ASSERT_TRUE(h.heap->Check().ok()) << h.heap->Check().ToString();
    EXPECT_EQ(h.alloc.used_chunks(), h.heap->stats().chunks);
    (void)ok;
  }
}

// ============================================================================================
// The slab header's persist, as the crash simulator sees it (H1)
// ============================================================================================

class RecordingHook : public pm::SimHook {
 public:
  struct Event {
    bool fence;
    uintptr_t addr;
    size_t len;
  };
  void OnFlush(const void* addr, size_t len) override {
    std::lock_guard<std::mutex> g(mu_);
    events_.push_back({false, reinterpret_cast<uintptr_t>(addr), len});
  }
  void OnFence() override {
    std::lock_guard<std::mutex> g(mu_);
    events_.push_back({true, 0, 0});
  }
  void OnNtCopy(void*, size_t) override {}
  std::vector<Event> Take() {
    std::lock_guard<std::mutex> g(mu_);
    return std::exchange(events_, {});
  }

 private:
  std::mutex mu_;
  std::vector<Event> events_;
};

TEST(RecordHeap, SlabHeaderIsPersistedBeforeItsFirstSlot) {
  Heap h(1024);
  RecordingHook hook;
  pm::Persister<pm::Sim> sim(pm::PersistTarget{&h.counters, &hook});
  auto a = h.heap->Allocate(24, sim);
  ASSERT_TRUE(a.ok());
  const uintptr_t header = reinterpret_cast<uintptr_t>(h.mem.get()) + a.value() - kSlabHeaderBytes;
  auto ev = hook.Take();
  // Exactly: flush of the header's line, then a fence, before the slot was handed out.
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_FALSE(ev[0].fence);
  EXPECT_LE(ev[0].addr, header);
  EXPECT_GE(ev[0].addr + ev[0].len, header + sizeof(SlabHeader));
  EXPECT_TRUE(ev[1].fence);
  // Later slots of the same slab cost no persist at all; nor does a free.
  for (int i = 0; i < 50; i++) ASSERT_TRUE(h.heap->Allocate(24, sim).ok());
  h.heap->Free(a.value(), 24);
  EXPECT_TRUE(hook.Take().empty());
  // A large record: no persist by the heap (its owner persists the record).
  ASSERT_TRUE(h.heap->Allocate(1000, sim).ok());
  EXPECT_TRUE(hook.Take().empty());
}

// ============================================================================================
// Crash simulator: a tiny index over the heap, crashed at every fence
// ============================================================================================
// The "index" is a table of kEntries 8-byte words in the first 4 KiB of the image; a word is
// (record offset << 16 | record bytes), 0 = empty. Insert: allocate, fill, persist the record,
// then store and persist the word. Update: the same, then retire the old record. Erase: clear
// and persist the word, then retire. In a heap of 8 slab positions, a first phase of mostly
// inserts of ~200 B records fills several slabs of two classes, a second phase of mostly erases
// empties them (back to the chunk heap), and a last phase of small and large records reuses
// their chunks as other classes and as large records.
// At every crash point, every image must recover: each word is the one before or after the
// operation in flight, every published record passes MarkReachable and holds its bytes, the
// heap's invariants hold, allocated == reachable, and new allocations never overlap a record.

constexpr int kEntries = 120;

uint8_t PatternByte(uint64_t word, uint64_t i) {
  return static_cast<uint8_t>((word * 131 + i) >> 3);
}

struct CrashRun {
  bool tear_words = false;
  uint64_t seed = 1;
  int ops = 600;
  uint64_t points = 0, images = 0, slabs_freed = 0;
  std::string failure;

  static constexpr uint64_t kChunks = 128;
  static constexpr uint64_t kBytes = kHeapOffset + kChunks * 256;

  // Recovers one image; empty string if it is consistent.
  static std::string Check(std::vector<char>& img, const std::array<uint64_t, kEntries>& before,
                           int pending, uint64_t after) {
    pm::ChunkAllocator a(kHeapOffset, 256, kChunks);
    EpochManager e;
    RecordHeap h(img.data(), &a, &e);
    a.Reset();
    h.Reset();
    std::vector<std::pair<uint64_t, uint64_t>> live;
    for (int i = 0; i < kEntries; i++) {
      uint64_t w;
      std::memcpy(&w, img.data() + 8 * i, 8);
      if (w != before[i] && !(i == pending && w == after)) {
        return "entry " + std::to_string(i) + " holds neither the old nor the new word";
      }
      if (w == 0) continue;
      const uint64_t off = w >> 16, n = w & 0xFFFF;
      if (Status s = h.MarkReachable(off, n); !s.ok()) return "recovery: " + s.ToString();
      for (uint64_t j = 0; j < n; j++) {
        if (static_cast<uint8_t>(img[off + j]) != PatternByte(w, j)) {
          return "record of entry " + std::to_string(i) + " lost its bytes";
        }
      }
      live.emplace_back(off, n);
    }
    if (Status s = h.Check(); !s.ok()) return s.ToString();
    if (a.used_chunks() != h.stats().chunks) return "allocated chunks != the heap's";
    if (h.stats().slab_records + h.stats().large_records != live.size()) return "leak";
    // Keep going: new records never land on a published one.
    pm::TrafficCounters counters;
    pm::Persister<pm::Dram> dram(&counters);
    for (uint64_t n : {24, 40, 100, 200, 600}) {
      auto r = h.Allocate(n, dram);
      if (!r.ok()) continue;  // a full heap is fine
      for (const auto& [off, len] : live) {
        if (r.value() < off + len && off < r.value() + n) return "allocation over a live record";
      }
    }
    return "";
  }

  void Run() {
    std::vector<char> mem(kBytes, 0);
    pm::CrashSimulator sim({.tear_words = tear_words});
    pm::ChunkAllocator alloc(kHeapOffset, 256, kChunks);
    EpochManager epoch;
    epoch.set_reclaim_batch(1);
    RecordHeap heap(mem.data(), &alloc, &epoch);
    pm::TrafficCounters counters;
    pm::Persister<pm::Sim> persist(pm::PersistTarget{&counters, &sim});
    std::array<uint64_t, kEntries> model{};
    int pending = -1;
    uint64_t after = 0;
    std::vector<char> img(kBytes);
    sim.set_crash_point_callback([&](uint64_t) {
      if (!failure.empty()) return;
      points++;
      const pm::CrashSimulator::State st = sim.Capture();
      pm::ForEachCrashChoice(st, seed ^ st.point, 2, 4, [&](const pm::CrashSimulator::Choice& c) {
        pm::CrashSimulator::BuildImage(st, c, img.data());
        images++;
        std::string why = Check(img, model, pending, after);
        if (!why.empty()) {
          failure = "crash point " + std::to_string(st.point) + " (" +
                    pm::CrashSimulator::DescribeChoice(st, c) + "): " + why;
          return false;
        }
        return true;
      }, 8);
    });
    sim.OnMap(mem.data(), mem.size());
    auto* table = reinterpret_cast<std::atomic<uint64_t>*>(mem.data());
    std::mt19937_64 rng(seed);
    const uint64_t big[] = {180, 200, 224, 224, 24};
    const uint64_t mixed[] = {8, 24, 24, 40, 64, 100, 150, 300, 600};
    uint64_t slabs_before = 0;
    for (int op = 0; op < ops && failure.empty(); op++) {
      const int phase = op < ops * 35 / 100 ? 0 : op < ops * 75 / 100 ? 1 : 2;
      // The middle phase walks the table in order, so most slabs empty completely.
      const int i = phase == 1 ? op % kEntries : static_cast<int>(rng() % kEntries);
      const uint64_t old = model[i];
      if (phase == 1 && old == 0) continue;  // erases and a few updates only
      pending = i;
      uint64_t word = 0;
      const uint64_t erase_in_6 = phase == 0 ? 1 : phase == 1 ? 5 : 2;
      if (old == 0 || rng() % 6 >= erase_in_6) {  // insert or update
        const uint64_t n =
            phase < 2 ? big[rng() % std::size(big)] : mixed[rng() % std::size(mixed)];
        auto r = heap.Allocate(n, persist);
        if (!r.ok()) {
          if (!r.status().IsOutOfSpace()) failure = r.status().ToString();
          continue;
        }
        word = (r.value() << 16) | n;
        for (uint64_t j = 0; j < n; j++) {
          mem[r.value() + j] = static_cast<char>(PatternByte(word, j));
        }
        persist.Flush(mem.data() + r.value(), n);
        persist.Fence();
      }
      after = word;
      table[i].store(word, std::memory_order_release);
      persist.Persist(&table[i], 8);
      model[i] = word;
      pending = -1;
      if (old != 0) heap.Retire(old >> 16, old & 0xFFFF);
      if (heap.stats().slabs < slabs_before) slabs_freed++;
      slabs_before = heap.stats().slabs;
      sim.CrashPoint();
    }
    epoch.Drain();  // retired records go back before the heap is destroyed
    sim.OnUnmap(mem.data(), mem.size());
  }
};

TEST(RecordHeapCrash, EveryCrashPointRecovers) {
  CrashRun run;
  run.seed = TestSeed(31);
  SCOPED_TRACE(SeedTrace(run.seed));
  run.ops = static_cast<int>(Scaled(600, 3));
  run.Run();
  EXPECT_TRUE(run.failure.empty()) << run.failure;
  EXPECT_GT(run.points, 100u);
  EXPECT_GT(run.images, run.points);
  if (!kSanitized) {
    EXPECT_GT(run.slabs_freed, 0u) << "no slab went back to the chunk heap";
  }
}

TEST(RecordHeapCrash, TornWords) {
  CrashRun run;
  run.seed = TestSeed(32);
  SCOPED_TRACE(SeedTrace(run.seed));
  run.tear_words = true;
  run.ops = static_cast<int>(Scaled(300, 3));
  run.Run();
  EXPECT_TRUE(run.failure.empty()) << run.failure;
  EXPECT_GT(run.images, 0u);
}

// ============================================================================================
// Many threads (label: concurrent)
// ============================================================================================

TEST(RecordHeapConcurrent, AllocFreeRetireFromManyThreads) {
  Heap h(1 << 14);  // 4 MiB
  const int nt = std::max(4, TestThreads());
  const uint64_t ops = Scaled(60000, 10);
  const uint64_t seed = TestSeed(0x4ea9);
  SCOPED_TRACE(SeedTrace(seed));
  std::atomic<uint64_t> errors{0};
  std::atomic<bool> stop{false};
  // Readers walk records that writers publish in a shared array and retire through the epoch.
  constexpr int kShared = 256;
  std::vector<std::atomic<uint64_t>> shared(kShared);  // offset << 16 | bytes, 0 = empty
  auto reader = [&] {
    std::mt19937_64 rng(seed ^ 0x77);
    while (!stop.load(std::memory_order_relaxed)) {
      EpochManager::Guard g(h.epoch);
      const uint64_t w = shared[rng() % kShared].load(std::memory_order_acquire);
      if (w != 0 && !h.Intact(w >> 16, w & 0xFFFF)) errors.fetch_add(1);
    }
  };
  auto writer = [&](int t) {
    std::mt19937_64 rng(seed + t);
    std::vector<std::pair<uint64_t, uint64_t>> mine;
    for (uint64_t i = 0; i < ops; i++) {
      const uint64_t r = rng() % 100;
      if (r < 50 || mine.empty()) {
        uint64_t n = 1 + rng() % 64;
        if (rng() % 16 == 0) n = 1 + rng() % 1200;
        auto a = h.Alloc(n);
        if (!a.ok()) {
          errors.fetch_add(1);
          continue;
        }
        h.Fill(a.value(), n);
        if (rng() % 4 == 0) {
          const uint64_t old = shared[rng() % kShared].exchange((a.value() << 16) | n);
          if (old) h.heap->Retire(old >> 16, old & 0xFFFF);
        } else {
          mine.emplace_back(a.value(), n);
        }
      } else {
        const size_t j = rng() % mine.size();
        if (!h.Intact(mine[j].first, mine[j].second)) errors.fetch_add(1);
        h.heap->Free(mine[j].first, mine[j].second);
        mine[j] = mine.back();
        mine.pop_back();
      }
    }
    for (const auto& [o, n] : mine) {
      if (!h.Intact(o, n)) errors.fetch_add(1);
      h.heap->Free(o, n);
    }
  };
  std::vector<std::thread> ts;
  for (int i = 0; i < 2; i++) ts.emplace_back(reader);
  std::vector<std::thread> ws;
  for (int t = 0; t < nt; t++) ws.emplace_back(writer, t);
  for (auto& t : ws) t.join();
  stop.store(true);
  for (auto& t : ts) t.join();
  EXPECT_EQ(errors.load(), 0u) << "a record was overwritten while allocated, or out of space";
  h.epoch.Drain();
  uint64_t left = 0;
  for (auto& s : shared) left += s.load() != 0;
  const pm::RecordHeapStats st = h.heap->stats();
  EXPECT_EQ(st.slab_records + st.large_records, left);
  EXPECT_EQ(h.alloc.used_chunks(), st.chunks);
  ASSERT_TRUE(h.heap->Check().ok()) << h.heap->Check().ToString();
}

}  // namespace
}  // namespace pmhash::testing
