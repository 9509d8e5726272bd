// tests/saved_state_test.cc — the DRAM-state image a clean Close saves (src/pm/saved_state.h):
// loaded once after a clean Close, never after a crash, and never trusted when it is damaged or
// forged (checksum, bounds, allocator accounting): every such open falls back to the recovery
// walk and answers exactly as the oracle.
#include "pm/saved_state.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pm/crash_sim.h"
#include "pm/pool_format.h"
#include "pm/record_heap.h"
#include "pmhash/pmhash.h"
#include "test_util.h"

namespace pmhash {
namespace {

using testing::PoolOptions;
using testing::ScopedPath;

// The kinds whose engines save their DRAM state at Close (a kind that starts saving one is
// added here: KindsThatDoNotSaveLoadNothing fails until it is).
const std::vector<std::string>& SavingKinds() {
  static const std::vector<std::string> kinds = {
      "reh", "reh-kv", "smartht", "smartht-kv", "elimda", "elimda-kv", "turbo", "turbo-kv",
      "pea-kv", "pea-multi"};
  return kinds;
}

Options SmallOptions(const std::string& path, std::string_view kind) {
  Options o = PoolOptions(path, Durability::kAdr, uint64_t{64} << 20);
  if (kind.starts_with("reh")) {
    o.reh.initial_depth = 2;  // splits and doublings with a few thousand keys
  }
  if (kind.starts_with("smartht")) {
    o.smartht.head_bits = 4;  // growth (split batches) and chained buckets
    o.smartht.save_filter_min_keys = 0;
  }
  if (kind.starts_with("turbo")) {  // rehashes (doublings) with a few thousand keys
    o.turbo.shard_bits = 2;
    o.turbo.initial_buckets = 2;
    o.hash_seed = 42;  // one layout every run: the forgeries below look for shapes in it
  }
  if (kind.starts_with("pea")) {  // 4 KiB segments: splits and doublings with a few thousand keys
    o.pea.segment_buckets = 16;
    o.pea.initial_depth = 0;
    o.hash_seed = 42;
  }
  if (kind == "pea-multi") o.pea.segment_buckets = 64;  // 16 KiB: value buffers of types 0-5
  if (kind.starts_with("elimda")) {  // log swaps, relocations and splits with a few thousand keys
    o.elimda.bucket_items = 32;
    o.elimda.dbucket_items = 16;
    o.elimda.segment_buckets = 2;
    o.elimda.logs = 4;
    o.elimda.writer_logs = 0;  // four logs by the hash, each with blocks: the forgeries use them
    o.elimda.initial_depth = 1;
    o.hash_seed = 42;  // one layout every run: the forgeries below edit it in place
  }
  return o;
}

// Fills a pool with n keys (splits, doublings), updates and erases some, closes it cleanly;
// returns the oracle.
std::unordered_map<Key, Value> MakeClosedPool(const std::string& path, std::string_view kind,
                                              uint64_t n) {
  std::unordered_map<Key, Value> oracle;
  auto r = Open(kind, SmallOptions(path, kind));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return oracle;
  std::mt19937_64 rng(7);
  for (uint64_t i = 0; i < n; i++) {
    const Key k = rng();
    EXPECT_TRUE((*r)->Insert(k, i).ok());
    oracle[k] = i;
  }
  uint64_t i = 0;
  for (auto it = oracle.begin(); it != oracle.end(); i++) {
    if (i % 5 == 0) {
      EXPECT_TRUE((*r)->Erase(it->first).ok());
      it = oracle.erase(it);
    } else {
      if (i % 5 == 1) {
        if (kind == "pea-multi") {  // (no Update of a key that may have several values)
          EXPECT_TRUE((*r)->Erase(it->first).ok());
          EXPECT_TRUE((*r)->Insert(it->first, i + 1).ok());
        } else {
          EXPECT_TRUE((*r)->Update(it->first, i + 1).ok());
        }
        it->second = i + 1;
      }
      ++it;
    }
  }
  EXPECT_TRUE((*r)->Close().ok());
  return oracle;
}

void ExpectMatches(Index& idx, const std::unordered_map<Key, Value>& oracle) {
  EXPECT_EQ(idx.Size(), oracle.size());
  for (const auto& [k, v] : oracle) {
    Value got = 0;
    ASSERT_TRUE(idx.Find(k, &got).ok()) << k;
    ASSERT_EQ(got, v) << k;
  }
  std::mt19937_64 rng(99);
  for (int i = 0; i < 1000; i++) {
    const Key k = rng();
    Value got = 0;
    if (!oracle.contains(k)) {
      EXPECT_TRUE(idx.Find(k, &got).IsNotFound());
    }
  }
  Status inv = idx.CheckInvariants();
  EXPECT_TRUE(inv.ok()) << inv.ToString();
}

// Opens the pool at `path` and checks which path the open took (`loaded`: the image, else the
// walk) and that it answers as the oracle.
void ExpectOpens(const std::string& path, const std::string& kind, bool loaded,
                 const std::unordered_map<Key, Value>& oracle) {
  auto r = Open(kind, SmallOptions(path, kind));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->Stats().state_loaded, loaded);
  ExpectMatches(**r, oracle);
}

// The pool file, mapped read-write while no index has it open.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR);
    if (fd_ < 0) return;
    size_ = static_cast<size_t>(::lseek(fd_, 0, SEEK_END));
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  ~MappedFile() {
    if (base_) ::munmap(base_, size_);
    if (fd_ >= 0) ::close(fd_);
  }
  char* base() const { return base_; }
  size_t size() const { return size_; }
  pm::PoolHeader* header() const { return reinterpret_cast<pm::PoolHeader*>(base_); }
  pm::SavedStateHeader* image() const {
    const uint64_t off = header()->saved_state.load();
    return off == 0 ? nullptr : reinterpret_cast<pm::SavedStateHeader*>(base_ + off);
  }
  // The engine's section of the image (after the allocator's bitmap).
  char* engine_section() const {
    return reinterpret_cast<char*>(image()) + sizeof(pm::SavedStateHeader) +
           image()->allocator_words * sizeof(uint64_t);
  }
  // Makes the image's checksum match its (edited) contents: what a hostile file can do.
  void Reseal() const {
    pm::SavedStateHeader* h = image();
    h->checksum = pm::SavedStateChecksum(header()->hash_seed, header()->create_time_ns, *h,
                                         reinterpret_cast<char*>(h) + sizeof(*h));
  }

 private:
  int fd_ = -1;
  size_t size_ = 0;
  char* base_ = nullptr;
};

class SavedStateTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SavedStateTest, CleanCloseIsLoadedOnceCrashIsWalked) {
  const std::string kind = GetParam();
  ScopedPath p("saved_" + kind);
  auto oracle = MakeClosedPool(p.path(), kind, 6000);
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr) << "a clean Close names its image in the header";
  }
  {
    auto r = Open(kind, SmallOptions(p.path(), kind));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const IndexStats st = (*r)->Stats();
    EXPECT_TRUE(st.state_loaded);
    EXPECT_FALSE(st.recovered);
    ExpectMatches(**r, oracle);
    {
      MappedFile f(p.path());
      EXPECT_EQ(f.header()->saved_state.load(), 0u) << "S2: an image is used once";
    }
    // Writes after the load (new keys): the loaded allocator and metadata must be the live ones.
    for (Key k = 1; k <= 3000; k++) {
      ASSERT_TRUE((*r)->Insert(k * 0x9E3779B97F4A7C15ull, k).ok());
      oracle[k * 0x9E3779B97F4A7C15ull] = k;
    }
    ExpectMatches(**r, oracle);
    (*r)->Abandon();  // a crash: the next open walks
  }
  {
    auto r = Open(kind, SmallOptions(p.path(), kind));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE((*r)->Stats().state_loaded);
    EXPECT_TRUE((*r)->Stats().recovered);
    ExpectMatches(**r, oracle);
    ASSERT_TRUE((*r)->Close().ok());
  }
  ExpectOpens(p.path(), kind, true, oracle);
}

// S2: the image of a pool that is not marked clean is ignored (and cleared).
TEST_P(SavedStateTest, UncleanPoolIgnoresTheImage) {
  const std::string kind = GetParam();
  ScopedPath p("saved_unclean_" + kind);
  auto oracle = MakeClosedPool(p.path(), kind, 3000);
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    f.header()->clean_shutdown.store(0);
  }
  auto r = Open(kind, SmallOptions(p.path(), kind));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE((*r)->Stats().state_loaded);
  EXPECT_TRUE((*r)->Stats().recovered);
  ExpectMatches(**r, oracle);
  MappedFile f(p.path());
  EXPECT_EQ(f.header()->saved_state.load(), 0u);
}

// S2: one flipped byte anywhere in the image fails its checksum.
TEST_P(SavedStateTest, DamagedImageFallsBackToTheWalk) {
  const std::string kind = GetParam();
  ScopedPath p("saved_damaged_" + kind);
  auto oracle = MakeClosedPool(p.path(), kind, 3000);
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    char* last = reinterpret_cast<char*>(f.image()) + sizeof(pm::SavedStateHeader) +
                 f.image()->payload_bytes - 1;
    *last ^= 0x10;
  }
  ExpectOpens(p.path(), kind, false, oracle);
}

// S3: an image whose allocator bitmap claims a chunk that nothing uses (a leak if trusted), or
// drops one in use, is refused by the accounting (REH, ElimDA: the chunks the section names;
// SmartHT, smartht.h I9: the used chunks' count), even with a valid checksum: the open walks,
// and CheckInvariants in ExpectMatches compares the allocator with what is reachable.
TEST_P(SavedStateTest, ForgedAllocatorIsRefused) {
  const std::string kind = GetParam();
  ScopedPath p("saved_forged_alloc_" + kind);
  auto oracle = MakeClosedPool(p.path(), kind, 3000);
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    auto* words = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(f.image()) +
                                              sizeof(pm::SavedStateHeader));
    // The highest free chunk the image covers (its last word holds the last chunk in use)...
    uint64_t w = f.image()->allocator_words;
    while (w > 0 && words[w - 1] == ~uint64_t{0}) w--;
    if (w > 0) {
      words[w - 1] |= uint64_t{1} << (63 - std::countl_zero(~words[w - 1]));
    } else {
      // ...or, if every chunk it covers is in use (1 run in 64 or so), the first chunk (the
      // table's, made at creation) dropped: a chunk in use that the allocator would hand out.
      words[0] &= ~uint64_t{1};
    }
    f.Reseal();
  }
  ExpectOpens(p.path(), kind, false, oracle);
}

// The image carries the allocator's bitmap up to its last used word only (a pool four times
// larger than its data: a quarter of the words or fewer), and the chunks past them are free
// after the load: the next writes take them, and CheckInvariants (in ExpectMatches) finds the
// allocator equal to what is reachable. A word count past the pool's bitmap (a forgery with a
// valid checksum) is refused: the open walks.
TEST_P(SavedStateTest, ImageCarriesTheUsedWordsOnly) {
  const std::string kind = GetParam();
  ScopedPath p("saved_used_words_" + kind);
  auto oracle = MakeClosedPool(p.path(), kind, 3000);
  uint64_t pool_words = 0;
  {
    auto opened = Open(kind, SmallOptions(p.path(), kind));
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    EXPECT_TRUE((*opened)->Stats().state_loaded);
    ExpectMatches(**opened, oracle);
    for (Key k = 1; k <= 2000; k++) {  // past the chunks the image covered, on some kinds
      ASSERT_TRUE((*opened)->Insert(k * 0xD1B54A32D192ED03ull, k).ok());
      oracle[k * 0xD1B54A32D192ED03ull] = k;
    }
    ASSERT_TRUE((*opened)->Close().ok());
  }
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    const pm::PoolHeader* h = f.header();
    pool_words = (h->pool_size - h->heap_offset) / h->chunk_size / 64 + 1;
    EXPECT_LT(f.image()->allocator_words * 2, pool_words) << "the unused words are not saved";
  }
  ExpectOpens(p.path(), kind, true, oracle);
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    f.image()->allocator_words = pool_words + 1;
    f.Reseal();
  }
  ExpectOpens(p.path(), kind, false, oracle);
}

// S1: the image, its name in the header and the clean mark are durable when Close returns: the
// persisted image of the pool (crash simulator: only what was flushed and fenced) loads.
TEST_P(SavedStateTest, ImageIsDurableWhenCloseReturns) {
  const std::string kind = GetParam();
  ScopedPath p("saved_durable");
  pm::CrashSimulator sim;
  ASSERT_EQ(pm::SetThreadSimHook(&sim), nullptr);
  std::unordered_map<Key, Value> oracle;
  std::vector<char> persisted;
  {
    Options o = SmallOptions(p.path(), kind);
    o.durability = Durability::kSim;
    auto r = Open(kind, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (Key k = 1; k <= 3000; k++) {
      ASSERT_TRUE((*r)->Insert(k * 0x9E3779B97F4A7C15ull, k).ok());
      oracle[k * 0x9E3779B97F4A7C15ull] = k;
    }
    ASSERT_TRUE((*r)->Close().ok());
    persisted = sim.Capture().persisted;  // a power failure right after Close returned
  }
  pm::SetThreadSimHook(nullptr);
  ASSERT_TRUE(testing::WriteFile(p.path(), std::vector<uint8_t>(persisted.begin(), persisted.end())));
  Options o = SmallOptions(p.path(), kind);
  o.durability = Durability::kSim;  // the durability the pool was created with
  auto r = Open(kind, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)->Stats().state_loaded);
  ExpectMatches(**r, oracle);
}

// S1: a crash at any fence of Close (the image persisted, then named, then the clean mark), with
// any of the lines then in flight written back or not, leaves a pool that opens to exactly the
// closed contents: by the walk until the clean mark is durable, by the image once it is.
TEST_P(SavedStateTest, CrashInsideCloseOpensEitherWay) {
  const std::string kind = GetParam();
  ScopedPath p("saved_close_crash");
  pm::CrashSimulator sim;
  ASSERT_EQ(pm::SetThreadSimHook(&sim), nullptr);
  std::unordered_map<Key, Value> oracle;
  std::vector<pm::CrashSimulator::State> states;
  Options o = SmallOptions(p.path(), kind);
  o.durability = Durability::kSim;
  o.pool_size = 8 << 20;
  {
    auto r = Open(kind, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (Key k = 1; k <= 3000; k++) {
      ASSERT_TRUE((*r)->Insert(k * 0x9E3779B97F4A7C15ull, k).ok());
      oracle[k * 0x9E3779B97F4A7C15ull] = k;
    }
    sim.set_crash_point_callback([&](uint64_t) { states.push_back(sim.Capture()); });
    ASSERT_TRUE((*r)->Close().ok());
    sim.set_crash_point_callback(nullptr);
  }
  pm::SetThreadSimHook(nullptr);
  ASSERT_GE(states.size(), 3u) << "the image, its name and the clean mark are fenced apart";
  int walked = 0, loaded = 0;
  for (const pm::CrashSimulator::State& st : states) {
    pm::ForEachCrashChoice(st, st.point, 2, 4, [&](const pm::CrashSimulator::Choice& c) {
      SCOPED_TRACE("crash point " + std::to_string(st.point) + " (" +
                   pm::CrashSimulator::DescribeChoice(st, c) + ")");
      std::vector<uint8_t> image(st.persisted.size());
      pm::CrashSimulator::BuildImage(st, c, reinterpret_cast<char*>(image.data()));
      EXPECT_TRUE(testing::WriteFile(p.path(), image));
      auto r = Open(kind, o);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (!r.ok()) return false;
      ((*r)->Stats().state_loaded ? loaded : walked)++;
      ExpectMatches(**r, oracle);
      return !::testing::Test::HasFailure();
    });
  }
  EXPECT_GT(walked, 0);
  EXPECT_GT(loaded, 0);
}

// S1: a table whose every key was erased still saves a state that loads (records kinds: the
// record heap's empty slabs go back to the chunk heap at Close, none is saved).
TEST_P(SavedStateTest, EmptiedTableLoads) {
  const std::string kind = GetParam();
  ScopedPath p("saved_emptied_" + kind);
  {
    auto r = Open(kind, SmallOptions(p.path(), kind));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (Key k = 1; k <= 3000; k++) ASSERT_TRUE((*r)->Insert(k * 0x9E3779B97F4A7C15ull, k).ok());
    for (Key k = 1; k <= 3000; k++) ASSERT_TRUE((*r)->Erase(k * 0x9E3779B97F4A7C15ull).ok());
    ASSERT_TRUE((*r)->Close().ok());
  }
  ExpectOpens(p.path(), kind, true, {});
}

INSTANTIATE_TEST_SUITE_P(Kinds, SavedStateTest, ::testing::ValuesIn(SavingKinds()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

// Each forgery edits the engine's section of a cleanly closed pool of `kind` (3000 keys) and
// reseals the image (a valid checksum): the open must refuse the image, walk, and answer as the
// oracle.
using Forgery = std::pair<std::string, std::function<void(char*)>>;
void ExpectForgeriesWalk(const std::string& kind, const std::vector<Forgery>& forgeries) {
  for (const auto& [what, forge] : forgeries) {
    SCOPED_TRACE(kind + ": " + what);
    ScopedPath p("saved_forged_" + kind);
    auto oracle = MakeClosedPool(p.path(), kind, 3000);
    {
      MappedFile f(p.path());
      ASSERT_NE(f.image(), nullptr);
      forge(f.engine_section());
      f.Reseal();
    }
    ExpectOpens(p.path(), kind, false, oracle);
  }
}

// S4, REH's section (reh.h I10: live, depth, buckets, then 32 B per bucket: header word,
// fingerprints, bitmap): forged entries with a valid checksum are bounded, never followed.
TEST(SavedStateReh, ForgedBucketsAreRefused) {
  constexpr size_t kFirst = 8 + 4 + 8;  // the first bucket's header word
  ExpectForgeriesWalk("reh", {
      {"bucket outside the pool",
       [](char* s) {
         uint64_t w;
         std::memcpy(&w, s + kFirst, 8);
         w = (w & ~((uint64_t{1} << 48) - 1)) | (uint64_t{1} << 40);
         std::memcpy(s + kFirst, &w, 8);
       }},
      {"bucket off its chunk",
       [](char* s) {
         uint64_t w;
         std::memcpy(&w, s + kFirst, 8);
         w += 64;
         std::memcpy(s + kFirst, &w, 8);
       }},
      {"depths that do not tile",
       [](char* s) {
         uint64_t w;
         std::memcpy(&w, s + kFirst, 8);
         w += uint64_t{1} << 48;  // one more than the bucket's depth
         std::memcpy(s + kFirst, &w, 8);
       }},
      {"a bucket named twice",
       [](char* s) {
         uint64_t first, second;
         std::memcpy(&first, s + kFirst, 8);
         std::memcpy(&second, s + kFirst + 32, 8);
         second = (second & ~((uint64_t{1} << 48) - 1)) | (first & ((uint64_t{1} << 48) - 1));
         std::memcpy(s + kFirst + 32, &second, 8);
       }},
      {"a live slot more than the count", [](char* s) { s[kFirst + 24] ^= 0x01; }},
      {"a bitmap bit past the last slot", [](char* s) { s[kFirst + 25] |= 0x80; }},
      {"more buckets than the section holds", [](char* s) { s[12] += 1; }},
  });
}

// S4: a forgery consistent with the allocator (other fingerprints for the first bucket's slots
// 0-7) loads, as the design accepts, and CheckInvariants (`pmhash check`) reports it: it compares
// the loaded metadata with the buckets in PM.
TEST(SavedStateReh, ConsistentForgeryIsFoundByCheckInvariants) {
  constexpr size_t kFirstFingerprints = 8 + 4 + 8 + 8;
  ScopedPath p("saved_forged_fp");
  MakeClosedPool(p.path(), "reh", 3000);
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    for (size_t i = 0; i < 8; i++) f.engine_section()[kFirstFingerprints + i] ^= 0x5A;
    f.Reseal();
  }
  auto r = Open("reh", SmallOptions(p.path(), "reh"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)->Stats().state_loaded);
  const Status s = (*r)->CheckInvariants();
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.ToString().find("stale fingerprint"), std::string::npos) << s.ToString();
}

// smartht.h I9: the section (root 0, live keys, chained buckets) must match the pool and the
// walk; a forged one with a valid checksum makes the open walk as after a crash.
TEST(SavedStateSmartHt, ForgedCountsAreRefused) {
  ExpectForgeriesWalk("smartht", {{"root 0", [](char* s) { s[0] ^= 0x01; }},
                                  {"live keys", [](char* s) { s[8] ^= 0x01; }},
                                  {"chained buckets", [](char* s) { s[16] ^= 0x01; }}});
}

// smartht.h I9/I10: a directory whose segment 1 names segment 0's chunks (both 16 heads: the
// chunk counts still add up, so only the ranges' disjointness can tell) is refused by a clean
// open (the image is not trusted; the walk refuses the directory) and by a lazy open after a
// crash, before either serves.
TEST(SavedStateSmartHt, DirectoryNamingAChunkTwiceIsRefused) {
  for (const bool clean : {true, false}) {
    SCOPED_TRACE(clean ? "clean" : "after a crash");
    ScopedPath p("saved_dir_twice");
    MakeClosedPool(p.path(), "smartht", 3000);
    {
      MappedFile f(p.path());
      ASSERT_NE(f.image(), nullptr);
      const uint64_t dir = f.header()->roots[2].load();
      uint64_t seg0 = 0, seg1 = 0;
      std::memcpy(&seg0, f.base() + dir + 8, 8);
      std::memcpy(&seg1, f.base() + dir + 16, 8);
      ASSERT_NE(seg1, 0u) << "the table has grown past its first 2^4 heads";
      std::memcpy(f.base() + dir + 16, &seg0, 8);
      if (!clean) f.header()->clean_shutdown.store(0);
    }
    auto r = Open("smartht", SmallOptions(p.path(), "smartht"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status().ToString();
  }
}

// S3 and smartht.h I9: a section longer than the three words SmartHT writes (the image's payload
// grown by a word, resealed) is not a state this Close wrote: the open walks. (SmartHT's load
// refuses it before it builds anything; the base also requires the section consumed exactly.)
TEST(SavedStateSmartHt, LongerSectionIsRefused) {
  ScopedPath p("saved_longer_smartht");
  auto oracle = MakeClosedPool(p.path(), "smartht", 3000);
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    pm::SavedStateHeader* h = f.image();
    h->payload_bytes += 8;
    if (sizeof(pm::SavedStateHeader) + h->payload_bytes > h->chunks * 64) {
      h->chunks++;  // (its last chunk was full: the next one too, whatever it holds)
    }
    f.Reseal();
  }
  ExpectOpens(p.path(), "smartht", false, oracle);
}

// smartht.h I9: the load walks no chain, so a link damaged after a clean Close (out of the pool,
// or closing a cycle) is not seen at open; every reader bounds it instead (Next): finds, inserts,
// erases, ForEach, Stats and the filter rebuild end the chain there and count it, nothing reads
// out of bounds or loops forever, CheckInvariants reports the chain, and after a crash the
// recovery walk refuses the pool (I10: the lazy open's, or the eager open's).
TEST(SavedStateSmartHt, ForgedLinksAreBoundedByEveryReader) {
  for (const bool cycle : {false, true}) {
    SCOPED_TRACE(cycle ? "a cycle" : "a link out of the pool");
    ScopedPath p("saved_forged_link");
    auto oracle = MakeClosedPool(p.path(), "smartht", 3000);
    {
      MappedFile f(p.path());
      ASSERT_NE(f.image(), nullptr);
      // The first head of segment 0 (the directory at root 2: [L0 | seg 0 | ...]; 2^4 heads)
      // that has a chained bucket; that bucket's link is forged.
      const uint64_t dir = f.header()->roots[2].load();
      uint64_t seg0 = 0, head = 0, first = 0;
      std::memcpy(&seg0, f.base() + dir + 8, 8);
      for (uint64_t i = 0; i < 16 && first == 0; i++) {
        head = seg0 + i * 64;
        std::memcpy(&first, f.base() + head + 56, 8);
      }
      ASSERT_NE(first, 0u) << "a head of segment 0 has chained buckets";
      const uint64_t link = cycle ? head : uint64_t{1} << 40;
      std::memcpy(f.base() + first + 56, &link, 8);
    }
    {
      auto r = Open("smartht", SmallOptions(p.path(), "smartht"));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      Index& idx = **r;
      EXPECT_TRUE(idx.Stats().state_loaded);
      for (const auto& [k, v] : oracle) {
        Value got = 0;
        (void)idx.Find(k, &got);
        (void)idx.Upsert(k, v + 1);
      }
      for (Key k = 1; k <= 500; k++) (void)idx.Insert(k * 0x9E3779B97F4A7C15ull, k);
      uint64_t pairs = 0;
      EXPECT_TRUE(idx.ForEach([&](Key, Value) { pairs++; }).ok());
      EXPECT_GT(pairs, 0u);
      const IndexStats st = idx.Stats();
      double bad = 0;
      for (const auto& d : st.details) {
        if (d.name == "smartht.bad_links") bad = d.value;
      }
      EXPECT_GT(bad, 0) << "the readers met the forged link";
      const Status inv = idx.CheckInvariants();
      EXPECT_TRUE(inv.IsCorruption()) << inv.ToString();
      idx.Abandon();
    }
    {  // smartht.h I10: the lazy crash open serves; its recovery walk finds the link
      auto r = Open("smartht", SmallOptions(p.path(), "smartht"));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_TRUE((*r)->CheckInvariants().IsCorruption()) << "the walk refuses the pool";
      EXPECT_TRUE((*r)->Insert(1, 1).IsCorruption());
      EXPECT_TRUE((*r)->Close().IsCorruption());
    }
    Options eager = SmallOptions(p.path(), "smartht");
    eager.smartht.lazy_recovery = false;
    auto r = Open("smartht", eager);
    ASSERT_FALSE(r.ok()) << "after a crash the walk refuses the pool";
    EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
  }
}

// smartht.h I9: the load checks no slot, so a token that does not match its key (a forgery the
// image cannot see) opens, and CheckInvariants (`pmhash check`) reports it.
TEST(SavedStateSmartHt, ForgedTokenIsFoundByCheckInvariants) {
  ScopedPath p("saved_forged_token");
  MakeClosedPool(p.path(), "smartht", 3000);
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    const uint64_t dir = f.header()->roots[2].load();
    uint64_t seg0 = 0;
    std::memcpy(&seg0, f.base() + dir + 8, 8);
    // The first token in use among segment 0's 2^4 heads (bytes 0-2 of each).
    char* token = nullptr;
    for (uint64_t at = 0; at < 16 * 64 && token == nullptr; at++) {
      if (at % 64 < 3 && f.base()[seg0 + at] != 0) token = f.base() + seg0 + at;
    }
    ASSERT_NE(token, nullptr) << "a head of segment 0 holds a pair";
    *token = static_cast<char>(static_cast<uint8_t>(*token) ^ 0x01);
  }
  auto r = Open("smartht", SmallOptions(p.path(), "smartht"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)->Stats().state_loaded);
  const Status s = (*r)->CheckInvariants();
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
}

// ElimDA's section (elimda.h I12), parsed as far as the forgeries below need: the offsets of the
// header words, of log 0's record, of the first segment's record and of its first bucket with
// D-bucket items (0 if none).
struct ElimdaSection {
  static constexpr size_t kBlocks = 8 + 4;        // the block count
  static constexpr size_t kLog0 = 8 + 4 + 8 + 8;  // log 0: [ n:4 | offsets:8n | mirror:4+30 ]
  size_t first_segment = 0;  // [ off:8 | depth:4 | per bucket: count:4 fps:2n nd:4 items:24nd ]
  size_t first_items = 0;    // the first D-bucket item of the first segment
  uint32_t log0_blocks = 0;
  size_t log1 = 0;  // log 1's record
  uint32_t log1_blocks = 0;
  std::vector<std::pair<size_t, uint32_t>> fingerprints;  // the first segment's: (offset, count)
  size_t end = 0;  // after the last segment (elimda-kv: the record heap's part starts there)

  explicit ElimdaSection(const char* s, uint32_t logs, uint32_t segment_buckets) {
    auto u32 = [&](size_t at) {
      uint32_t v;
      std::memcpy(&v, s + at, 4);
      return v;
    };
    size_t at = kLog0;
    for (uint32_t li = 0; li < logs; li++) {
      const uint32_t n = u32(at);
      if (li == 0) log0_blocks = n;
      if (li == 1) log1 = at, log1_blocks = n;
      at += 4 + 8 * size_t{n} + (n ? 4 + 30 : 0);
    }
    uint64_t empties;
    std::memcpy(&empties, s + at, 8);
    at += 8 + 8 * empties;
    first_segment = at;
    uint64_t segments;
    std::memcpy(&segments, s + 8 + 4 + 8, 8);
    for (uint64_t seg = 0; seg < segments; seg++) {
      at += 12;
      for (uint32_t b = 0; b < segment_buckets; b++) {
        if (seg == 0) fingerprints.emplace_back(at + 4, u32(at));
        at += 4 + 2 * size_t{u32(at)};
        const uint32_t nd = u32(at);
        at += 4;
        if (seg == 0 && nd > 0 && first_items == 0) first_items = at;
        at += 24 * size_t{nd};
      }
    }
    end = at;
  }
};

// S4, ElimDA's section: forged entries with a valid checksum are bounded, never followed.
TEST(SavedStateElimda, ForgedEntriesAreRefused) {
  using Forge = std::function<void(char*, const ElimdaSection&)>;
  auto add64 = [](char* at, uint64_t d) {
    uint64_t w;
    std::memcpy(&w, at, 8);
    w += d;
    std::memcpy(at, &w, 8);
  };
  auto set64 = [](char* at, uint64_t v) { std::memcpy(at, &v, 8); };
  const std::vector<std::pair<std::string, Forge>> forgeries = {
      {"a log block outside the pool",
       [&](char* s, const ElimdaSection& e) { set64(s + e.kLog0 + 4, uint64_t{1} << 40); }},
      {"a log block off its chunk",
       [&](char* s, const ElimdaSection& e) { add64(s + e.kLog0 + 4, 64); }},
      {"a log block named twice",
       [&](char* s, const ElimdaSection& e) {
         ASSERT_GE(e.log0_blocks, 2u);
         std::memcpy(s + e.kLog0 + 12, s + e.kLog0 + 4, 8);
       }},
      {"a log's first block not its table word",
       [&](char* s, const ElimdaSection& e) {
         ASSERT_GE(e.log0_blocks, 2u);
         char tmp[8];  // the two newest blocks swapped: every chunk still named once
         std::memcpy(tmp, s + e.kLog0 + 4, 8);
         std::memcpy(s + e.kLog0 + 4, s + e.kLog0 + 12, 8);
         std::memcpy(s + e.kLog0 + 12, tmp, 8);
       }},
      {"two logs' active blocks swapped",
       [&](char* s, const ElimdaSection& e) {
         ASSERT_GE(e.log0_blocks, 1u);
         ASSERT_GE(e.log1_blocks, 1u);
         // Each head, and its mirror, listed under the other log: every chunk still named once,
         // no D-bucket item names either; only the table words tell.
         auto swap = [&](size_t a, size_t b, size_t n) {
           std::vector<char> tmp(s + a, s + a + n);
           std::memcpy(s + a, s + b, n);
           std::memcpy(s + b, tmp.data(), n);
         };
         swap(e.kLog0 + 4, e.log1 + 4, 8);
         swap(e.kLog0 + 4 + 8 * size_t{e.log0_blocks}, e.log1 + 4 + 8 * size_t{e.log1_blocks},
              4 + 30);
       }},
      {"more blocks than listed",
       [&](char* s, const ElimdaSection& e) { add64(s + e.kBlocks, 1); }},
      {"a mirror bit past the last slot",
       [&](char* s, const ElimdaSection& e) {
         s[e.kLog0 + 4 + 8 * size_t{e.log0_blocks} + 1] |= static_cast<char>(0x80);
       }},
      {"a segment outside the pool",
       [&](char* s, const ElimdaSection& e) { set64(s + e.first_segment, uint64_t{1} << 40); }},
      {"a segment off its chunk",
       [&](char* s, const ElimdaSection& e) { add64(s + e.first_segment, 256); }},
      {"a depth that does not tile",
       [&](char* s, const ElimdaSection& e) { s[e.first_segment + 8] += 1; }},
      {"a bucket count over N_p",
       [&](char* s, const ElimdaSection& e) {
         const uint32_t n = 33;
         std::memcpy(s + e.first_segment + 12, &n, 4);
       }},
      {"a D-bucket item naming a block past the list",
       [&](char* s, const ElimdaSection& e) {
         ASSERT_NE(e.first_items, 0u) << "the first segment has D-bucket items";
         set64(s + e.first_items + 16, uint64_t{1} << 40);
       }},
      {"a D-bucket item naming slot 15",
       [&](char* s, const ElimdaSection& e) {
         ASSERT_NE(e.first_items, 0u);
         s[e.first_items + 16] |= 0x0F;
       }},
      {"a D-bucket item naming the active block of a log",
       [&](char* s, const ElimdaSection& e) {
         ASSERT_NE(e.first_items, 0u);
         ASSERT_GE(e.log0_blocks, 1u);  // block 0 of the image: log 0's newest, its active one
         set64(s + e.first_items + 16, static_cast<uint64_t>(s[e.first_items + 16] & 0x0F));
       }},
  };
  const Options o = SmallOptions("", "elimda");
  std::vector<Forgery> parsed;
  for (const auto& f : forgeries) {
    parsed.emplace_back(f.first, [&o, forge = f.second](char* s) {
      forge(s, ElimdaSection(s, *o.elimda.logs, *o.elimda.segment_buckets));
    });
  }
  ExpectForgeriesWalk("elimda", parsed);
}

// S4: a P-bucket count over N_p, its fingerprints all present (the section grown to hold them,
// so that the rest still parses), is refused: the load would write past the bucket's
// fingerprints, and readers would read past its slots.
TEST(SavedStateElimda, CountOverBucketItemsIsRefused) {
  ScopedPath p("saved_forged_elimda_count");
  auto oracle = MakeClosedPool(p.path(), "elimda", 3000);
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    const Options o = SmallOptions(p.path(), "elimda");
    const uint32_t over = *o.elimda.bucket_items + 1;
    pm::SavedStateHeader* h = f.image();
    char* s = f.engine_section();
    const size_t len = h->payload_bytes - h->allocator_words * sizeof(uint64_t);
    const ElimdaSection e(s, *o.elimda.logs, *o.elimda.segment_buckets);
    // The first segment's fullest P-bucket: the fewest fingerprints to add.
    const auto [fps, n] = *std::max_element(
        e.fingerprints.begin(), e.fingerprints.end(),
        [](const auto& x, const auto& y) { return x.second < y.second; });
    const size_t at = fps + 2 * size_t{n};  // past the bucket's fingerprints
    const size_t extra = 2 * size_t{over - n};
    ASSERT_LE(sizeof(pm::SavedStateHeader) + h->payload_bytes + extra, h->chunks * 256)
        << "the image's last chunk has room for the added fingerprints";
    std::memmove(s + at + extra, s + at, len - at);
    std::memset(s + at, 0, extra);
    std::memcpy(s + fps - 4, &over, 4);
    h->payload_bytes += extra;
    f.Reseal();
  }
  ExpectOpens(p.path(), "elimda", false, oracle);
}

// S4: a forgery consistent with the allocator (other fingerprints for the first segment's slots:
// all of them, so that live items are among them) loads, as the design accepts, and
// CheckInvariants (`pmhash check`) reports it.
TEST(SavedStateElimda, ConsistentForgeryIsFoundByCheckInvariants) {
  ScopedPath p("saved_forged_elimda_fp");
  MakeClosedPool(p.path(), "elimda", 3000);
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    const Options o = SmallOptions(p.path(), "elimda");
    const ElimdaSection e(f.engine_section(), *o.elimda.logs, *o.elimda.segment_buckets);
    uint32_t items = 0;
    for (const auto& [at, n] : e.fingerprints) {
      for (size_t x = 0; x < n; x++) f.engine_section()[at + 2 * x] ^= 0x5A;
      items += n;
    }
    ASSERT_GE(items, 16u) << "the first segment's P-buckets hold items";
    f.Reseal();
  }
  auto r = Open("elimda", SmallOptions(p.path(), "elimda"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)->Stats().state_loaded);
  const Status s = (*r)->CheckInvariants();
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
}

// turbo.h I8: the section (live pairs, then each shard's deleted-slot count) is bounded by the
// shards' slots; a forged count with a valid checksum makes the open walk.
TEST(SavedStateTurbo, ForgedCountsAreRefused) {
  ExpectForgeriesWalk("turbo", {
      {"more live pairs than slots", [](char* s) { s[5] = 1; }},
      {"more deleted slots than shard 0 has", [](char* s) { s[8 + 3] = 1; }},
  });
}

// The turbo pool at `path` as its file holds it: the active shard words of the directory.
struct TurboShards {
  static constexpr size_t kDescBytes = 32;  // turbo::PmShardDesc
  explicit TurboShards(const MappedFile& f) : f_(f), dir_(f.header()->roots[0].load()) {}
  uint64_t* word(uint32_t s) const {
    char* d = f_.base() + dir_ + s * kDescBytes;
    uint64_t version = 0;
    std::memcpy(&version, d + 16, 8);
    return reinterpret_cast<uint64_t*>(d + 8 * version);
  }
  uint64_t offset(uint32_t s) const { return *word(s) & ((uint64_t{1} << 48) - 1); }
  uint32_t buckets(uint32_t s) const { return 1u << (*word(s) >> 48); }
  uint64_t* meta(uint32_t s, uint32_t b) const {
    return reinterpret_cast<uint64_t*>(f_.base() + offset(s) + uint64_t{b} * 256);
  }
  const MappedFile& f_;
  uint64_t dir_;
};

// turbo.h I8: the load checks the directory against the loaded allocator. A shard whose active
// set names another shard's buckets (same size: the used-chunk count still adds up) or a place
// outside the pool is refused by the load, and then by the walk.
TEST(SavedStateTurbo, ForgedDirectoryIsRefused) {
  for (const bool alias : {true, false}) {
    SCOPED_TRACE(alias ? "a shard named twice" : "a shard outside the pool");
    ScopedPath p("saved_forged_turbo_dir");
    MakeClosedPool(p.path(), "turbo", 3000);
    {
      MappedFile f(p.path());
      ASSERT_NE(f.image(), nullptr);
      TurboShards t(f);
      uint32_t other = 1;
      while (other < 4 && t.buckets(other) != t.buckets(0)) other++;
      ASSERT_LT(other, 4u) << "a shard of shard 0's size";
      *t.word(other) = alias ? *t.word(0) : (*t.word(other) & ~((uint64_t{1} << 48) - 1)) |
                                                (uint64_t{1} << 40);
    }
    auto r = Open("turbo", SmallOptions(p.path(), "turbo"));
    ASSERT_FALSE(r.ok()) << "opened with state_loaded " << (*r)->Stats().state_loaded;
    EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
  }
}

// turbo.h I8: the load reads no bucket, so a meta word forged after a clean Close is met by the
// operations. Bits past the 14 slots (valid and delete) change nothing any operation does: the
// index still answers as the oracle through finds, ForEach, inserts, updates and erases, and
// CheckInvariants reports the bits. A bucket forged to have no empty slot (its never-written
// slots made live: key 0, value 0) refuses the update of its keys (the near-place reserve)
// instead of writing past the bucket.
TEST(SavedStateTurbo, ForgedMetaWordsAreBounded) {
  ScopedPath p("saved_forged_turbo_meta");
  auto oracle = MakeClosedPool(p.path(), "turbo", 3000);
  Key full_key = 0;
  uint64_t zero_slots = 0;  // live (key 0, value 0) slots the forgery adds
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    TurboShards t(f);
    for (uint32_t s = 1; s < 4; s++) {
      for (uint32_t b = 0; b < t.buckets(s); b++) *t.meta(s, b) |= 0xC000C000ull;
    }
    // Shard 0: the first bucket with a live slot whose empty slots were never written.
    for (uint32_t b = 0; b < t.buckets(0) && full_key == 0; b++) {
      uint64_t& m = *t.meta(0, b);
      const char* slots = f.base() + t.offset(0) + uint64_t{b} * 256 + 32;
      const uint32_t valid = m & 0x3FFF, live = valid & ~((m >> 16) & 0x3FFF);
      const uint32_t empty = ~valid & 0x3FFF;
      bool zero = live != 0 && empty != 0;
      for (uint32_t c = empty; c && zero; c &= c - 1) {
        for (int i = 0; i < 16; i++) zero = zero && slots[16 * std::countr_zero(c) + i] == 0;
      }
      if (!zero) continue;
      std::memcpy(&full_key, slots + 16 * std::countr_zero(live), 8);
      zero_slots = static_cast<uint64_t>(std::popcount(empty));
      m |= 0x3FFF;
    }
    ASSERT_NE(full_key, 0u);
    ASSERT_TRUE(oracle.contains(full_key));
  }
  auto r = Open("turbo", SmallOptions(p.path(), "turbo"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Index& idx = **r;
  EXPECT_TRUE(idx.Stats().state_loaded);
  auto expect_for_each = [&] {
    uint64_t pairs = 0, zeros = 0;
    ASSERT_TRUE(idx.ForEach([&](Key k, Value v) {
                     pairs++;
                     if (k == 0 && v == 0) zeros++;
                     auto it = oracle.find(k);
                     EXPECT_TRUE(k == 0 || (it != oracle.end() && it->second == v)) << k;
                   }).ok());
    EXPECT_EQ(pairs, oracle.size() + zero_slots);
    EXPECT_EQ(zeros, zero_slots);
  };
  expect_for_each();
  const Status full = idx.Update(full_key, 1);
  EXPECT_TRUE(full.IsCorruption()) << full.ToString();
  // Every key: the oracle's answers, through updates, erases and inserts.
  std::mt19937_64 rng(3);
  uint64_t i = 0;
  for (auto it = oracle.begin(); it != oracle.end(); i++) {
    Value got = 0;
    ASSERT_TRUE(idx.Find(it->first, &got).ok()) << it->first;
    ASSERT_EQ(got, it->second);
    if (i % 3 == 0) {
      const Status st = idx.Update(it->first, i);
      ASSERT_TRUE(st.ok() || st.IsCorruption()) << st.ToString();
      if (st.ok()) it->second = i;  // (refused: a key of the forged bucket, unchanged)
    } else if (i % 3 == 1) {
      ASSERT_TRUE(idx.Erase(it->first).ok());
      it = oracle.erase(it);
      continue;
    }
    ++it;
  }
  for (int n = 0; n < 2000; n++) {
    const Key k = rng();
    if (k == 0 || oracle.contains(k)) continue;
    const Status st = idx.Insert(k, k);
    ASSERT_TRUE(st.ok()) << st.ToString();
    oracle[k] = k;
  }
  for (const auto& [k, v] : oracle) {
    Value got = 0;
    ASSERT_TRUE(idx.Find(k, &got).ok()) << k;
    ASSERT_EQ(got, v);
  }
  expect_for_each();
  const Status inv = idx.CheckInvariants();
  EXPECT_TRUE(inv.IsCorruption()) << inv.ToString();
  idx.Abandon();
}

// turbo.h I7/I8: a live slot's tag that a crash left stale (the meta word's 8 bytes durable, the
// tag's not: a torn line) is rewritten by the walk and persisted, so the image of a later clean
// Close, which trusts the tags in PM, still finds the key after a power failure.
TEST(SavedStateTurbo, TagsTheWalkFixesAreDurable) {
  ScopedPath p("saved_turbo_tags");
  Options o = SmallOptions(p.path(), "turbo");
  o.durability = Durability::kSim;
  std::unordered_map<Key, Value> oracle;
  // Opens the pool under a crash simulator, runs `work`, closes it cleanly, and leaves in the
  // file only what was persisted (a power failure right after Close returned).
  auto cycle = [&](bool expect_loaded, const std::function<void(Index&)>& work) {
    pm::CrashSimulator sim;
    ASSERT_EQ(pm::SetThreadSimHook(&sim), nullptr);
    std::vector<char> persisted;
    {
      auto r = Open("turbo", o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ((*r)->Stats().state_loaded, expect_loaded);
      work(**r);
      ASSERT_TRUE((*r)->Close().ok());
      persisted = sim.Capture().persisted;
    }
    pm::SetThreadSimHook(nullptr);
    ASSERT_TRUE(
        testing::WriteFile(p.path(), std::vector<uint8_t>(persisted.begin(), persisted.end())));
  };
  cycle(false, [&](Index& idx) {
    for (Key k = 1; k <= 3000; k++) {
      ASSERT_TRUE(idx.Insert(k * 0x9E3779B97F4A7C15ull, k).ok());
      oracle[k * 0x9E3779B97F4A7C15ull] = k;
    }
  });
  {  // every live slot's tag made stale, and the pool unclean: the next open walks
    MappedFile f(p.path());
    TurboShards t(f);
    uint64_t stale = 0;
    for (uint32_t s = 0; s < 4; s++) {
      for (uint32_t b = 0; b < t.buckets(s); b++) {
        const uint64_t m = *t.meta(s, b);
        char* tags = reinterpret_cast<char*>(t.meta(s, b)) + 8;
        for (uint32_t c = (m & 0x3FFF) & ~((m >> 16) & 0x3FFF); c; c &= c - 1, stale++) {
          tags[std::countr_zero(c)] ^= 0x5A;
        }
      }
    }
    ASSERT_EQ(stale, oracle.size());
    f.header()->clean_shutdown.store(0);
  }
  cycle(false, [](Index& idx) { EXPECT_TRUE(idx.Stats().recovered); });
  auto r = Open("turbo", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)->Stats().state_loaded);
  ExpectMatches(**r, oracle);
}

// pea.h I14: pea-kv's section is its live count, then the record heap's. A count the heap's
// records do not match is refused; so is a directory the walk would repair (a stride whose
// entries differ from its lowest one, as an interrupted split leaves it): the open walks, and
// the walk repairs it.
TEST(SavedStatePea, ForgedCountAndUnrepairedStrideAreRefused) {
  ExpectForgeriesWalk("pea-kv", {{"a live count one above the records", [](char* s) {
                                    uint64_t live;
                                    std::memcpy(&live, s, 8);
                                    live++;
                                    std::memcpy(s, &live, 8);
                                  }}});
  ScopedPath p("saved_pea_stride");
  auto oracle = MakeClosedPool(p.path(), "pea-kv", 5000);  // (3000: every segment at depth G)
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    // The current directory: the descriptor [G:8 | offset:56] with the larger G (roots 0, 1).
    const uint64_t d0 = f.header()->roots[0].load(), d1 = f.header()->roots[1].load();
    const uint64_t desc = (d0 >> 56) > (d1 >> 56) ? d0 : d1;
    const uint32_t g = static_cast<uint32_t>(desc >> 56);
    auto* entries = reinterpret_cast<uint64_t*>(f.base() + (desc & ((uint64_t{1} << 56) - 1)));
    bool forged = false;
    for (uint64_t i = 0; i + 1 < (uint64_t{1} << g) && !forged; i++) {
      const uint32_t ld = static_cast<uint32_t>(entries[i] >> 48) & 0xFF;
      if (ld < g && i % (uint64_t{1} << (g - ld)) == 0) {
        entries[i + 1] ^= 1;  // another segment id: step 1 of a split without its commit
        forged = true;
      }
    }
    ASSERT_TRUE(forged) << "a segment of local depth below the global one";
  }
  ExpectOpens(p.path(), "pea-kv", false, oracle);
}

// A pea-multi pool with duplicate keys (value buffers of every type a 4 KiB slab holds, chain
// nodes, erased pairs), closed cleanly; returns the oracle (each key's values, sorted).
std::map<Key, std::vector<Value>> MakeClosedMultiPool(const std::string& path) {
  std::map<Key, std::vector<Value>> oracle;
  auto r = Open("pea-multi", SmallOptions(path, "pea-multi"));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return oracle;
  MultiApi* m = (*r)->multi();
  EXPECT_NE(m, nullptr);
  std::mt19937_64 rng(11);
  for (Key k = 1; k <= 300; k++) {
    const uint64_t n = k % 10 == 0 ? 700 : 1 + rng() % 6;  // a few keys with long lists
    for (uint64_t v = 0; v < n; v++) {
      EXPECT_TRUE(m->Insert(k, k * 1000 + v).ok());
      oracle[k].push_back(k * 1000 + v);
    }
  }
  for (Key k = 1; k <= 300; k += 7) {  // some pairs erased, some keys emptied
    if (k % 2 == 0) {
      EXPECT_TRUE(m->EraseAll(k).ok());
      oracle.erase(k);
    } else {
      EXPECT_TRUE(m->Erase(k, k * 1000).ok());
      oracle[k].erase(oracle[k].begin());
      if (oracle[k].empty()) oracle.erase(k);
    }
  }
  const IndexStats st = (*r)->Stats();
  EXPECT_GT(testing::Detail(st, "pea.multi.buffer_grows"), 0);
  EXPECT_GT(testing::Detail(st, "pea.multi.chain_nodes"), 0);
  EXPECT_TRUE((*r)->Close().ok());
  return oracle;
}

// pea.h I14: a pea-multi pool with duplicate keys opens from its image after a clean Close and
// answers every key's values as before.
TEST(SavedStatePeaMulti, DuplicatesLoad) {
  ScopedPath p("saved_pea_multi");
  const auto oracle = MakeClosedMultiPool(p.path());
  auto r = Open("pea-multi", SmallOptions(p.path(), "pea-multi"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)->Stats().state_loaded);
  MultiApi* m = (*r)->multi();
  uint64_t pairs = 0;
  for (const auto& [k, vals] : oracle) {
    std::vector<Value> got;
    ASSERT_TRUE(m->FindAll(k, &got).ok()) << k;
    std::sort(got.begin(), got.end());
    ASSERT_EQ(got, vals) << k;
    pairs += vals.size();
  }
  EXPECT_EQ(m->Size(), pairs);
  const Status inv = (*r)->CheckInvariants();
  EXPECT_TRUE(inv.ok()) << inv.ToString();
  // Writes after the load: appends (growing buffers), pair and key erases.
  for (const auto& [k, vals] : oracle) {
    ASSERT_TRUE(m->Insert(k, 1).ok());
    ASSERT_TRUE(m->Erase(k, vals.back()).ok());
  }
  ASSERT_TRUE(m->EraseAll(oracle.begin()->first).ok());
  const Status inv2 = (*r)->CheckInvariants();
  EXPECT_TRUE(inv2.ok()) << inv2.ToString();
}

// pea.h I14: a clean Close leaves every redo log empty; a committed one (n > 0) makes the open
// walk, and the walk applies it (I12).
TEST(SavedStatePeaMulti, CommittedRedoLogIsApplied) {
  ScopedPath p("saved_pea_multi_log");
  const auto oracle = MakeClosedMultiPool(p.path());
  uint64_t target = 0;
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    // Root 3: the redo logs, 64 of [ n:8 | pad:56 | (offset, value) x 64 ]. Log 0 commits one
    // store into an unused pair of log 1 (inside the heap, read by nobody).
    const uint64_t logs = f.header()->roots[3].load();
    constexpr uint64_t kLogBytes = 64 + 16 * 64;
    target = logs + kLogBytes + 64 + 16 * 63;
    auto* log0 = reinterpret_cast<uint64_t*>(f.base() + logs);
    log0[8] = target;
    log0[9] = 0x5EED;
    log0[0] = 1;
  }
  auto r = Open("pea-multi", SmallOptions(p.path(), "pea-multi"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE((*r)->Stats().state_loaded);
  const Status inv = (*r)->CheckInvariants();
  EXPECT_TRUE(inv.ok()) << inv.ToString();  // (it refuses a log left committed)
  EXPECT_EQ((*r)->multi()->Size(),
            std::accumulate(oracle.begin(), oracle.end(), uint64_t{0},
                            [](uint64_t n, const auto& kv) { return n + kv.second.size(); }));
  ASSERT_TRUE((*r)->Close().ok());
  MappedFile f(p.path());
  uint64_t applied = 0;
  std::memcpy(&applied, f.base() + target, 8);
  EXPECT_EQ(applied, 0x5EEDu);
}

// pea.h I15: the load reads no value node, so nodes forged after a clean Close (every node of
// the first slab the image names: a capacity past the pool, a cycle, a count over the capacity,
// a type that does not exist) are met by the operations: finds, appends, erases of a pair or a
// key and ForEach read and write nothing outside the pool, return (kCorruption for a writer
// that meets one), and CheckInvariants reports them.
TEST(SavedStatePeaMulti, ForgedListsAreBounded) {
  ScopedPath p("saved_pea_multi_forged");
  const auto oracle = MakeClosedMultiPool(p.path());
  uint64_t forged = 0;
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    const char* s = f.engine_section() + 8;  // after the live count: the value heap's part
    uint64_t slabs = 0, slab = 0, cls = 0, bits = 0;
    std::memcpy(&slabs, s, 8);
    ASSERT_GE(slabs, 1u);
    std::memcpy(&slab, s + 24, 8);
    std::memcpy(&cls, s + 32, 8);
    std::memcpy(&bits, s + 40, 8);
    ASSERT_LT(cls, pm::kClassBytes.size());
    const uint64_t bytes = pm::kClassBytes[cls];
    for (uint32_t k = 0; k < 64; k++) {
      if (((bits >> k) & 1) == 0) continue;
      const uint64_t off = slab + pm::kSlabHeaderBytes + bytes * k;
      auto* node = reinterpret_cast<uint64_t*>(f.base() + off);  // key, state, geom, reserved
      switch (forged++ % 4) {
        case 0: node[2] = (node[2] & ~uint64_t{0xFFFFFFFF}) | 0xFFFFFFF0; break;  // capacity
        case 1: node[1] = (node[1] & 0xFFFFF) | ((off >> 4) << 20); break;       // next: itself
        case 2: node[1] = (node[1] & ~uint64_t{0xFFFFF}) | 0xFFFFF; break;       // count
        case 3: node[2] = (node[2] & 0xFFFFFFFF) | (uint64_t{9} << 32); break;   // type 9
      }
    }
  }
  ASSERT_GE(forged, 4u);
  auto r = Open("pea-multi", SmallOptions(p.path(), "pea-multi"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Index& idx = **r;
  EXPECT_TRUE(idx.Stats().state_loaded);
  const Status inv = idx.CheckInvariants();
  EXPECT_TRUE(inv.IsCorruption()) << inv.ToString();
  MultiApi* m = idx.multi();
  uint64_t pairs = 0, exact = 0, refused = 0;
  (void)m->ForEach([&](Key, Value) { pairs++; });
  uint64_t i = 0;
  for (const auto& [k, vals] : oracle) {
    std::vector<Value> got;
    (void)m->FindAll(k, &got);
    std::sort(got.begin(), got.end());
    exact += got == vals;
    (void)m->Count(k);
    refused += m->Insert(k, 7).IsCorruption();
    refused += m->Erase(k, vals.back()).IsCorruption();
    if (i++ % 3 == 0) refused += m->EraseAll(k).IsCorruption();
  }
  EXPECT_GT(refused, 0u) << "writers meet the forged nodes";
  EXPECT_LT(exact, oracle.size());
  EXPECT_GT(exact, oracle.size() / 2) << "the lists not forged answer as before";
  idx.Abandon();
}

// Where the record heap's part of a records kind's section starts (record_heap.h, "Clean
// shutdown"): after turbo-kv's counts (4 shards), after reh-kv's buckets, after smartht-kv's five
// words, after pea-kv's live count, after elimda-kv's segments (4 logs, 2 buckets a segment).
size_t HeapSection(std::string_view kind, const char* s) {
  if (kind == "smartht-kv") return 5 * 8;
  if (kind == "elimda-kv") return ElimdaSection(s, 4, 2).end;
  if (kind == "pea-kv") return 8;
  if (kind == "reh-kv") {
    uint64_t buckets = 0;
    std::memcpy(&buckets, s + 12, 8);
    return 8 + 4 + 8 + 32 * buckets;
  }
  return 8 + 4 * 4;
}

// record_heap.h "Clean shutdown": a records kind's section ends with the record heap's
// (slabs:64, large records:64, large chunks:64, then per slab offset:64, class:64 and its
// bitmap: 2 words for the 32 B class of a 24 B record). A forged one with a valid checksum makes
// the open walk.
TEST(SavedStateRecords, ForgedHeapSectionIsRefused) {
  // The section's words are not 8-aligned in the file (reh-kv's follow 20 B): copied, not cast.
  auto get = [](const char* s, size_t at) {
    uint64_t v;
    std::memcpy(&v, s + at, 8);
    return v;
  };
  auto set = [](char* s, size_t at, uint64_t v) { std::memcpy(s + at, &v, 8); };
  // Each edits the heap's part, which starts at h (its first slab at h + 24, the second at h + 56).
  const std::vector<std::pair<std::string, std::function<void(char*, size_t)>>> forgeries = {
      {"more slabs than the section holds", [&](char* s, size_t h) { set(s, h, get(s, h) + 1); }},
      {"large chunks the allocator does not hold",
       [&](char* s, size_t h) { set(s, h + 16, get(s, h + 16) + 1); }},
      {"a slab off its slab position",
       [&](char* s, size_t h) { set(s, h + 24, get(s, h + 24) + 256); }},
      {"a slab named twice", [&](char* s, size_t h) { set(s, h + 56, get(s, h + 24)); }},
      {"an unknown size class", [&](char* s, size_t h) { set(s, h + 32, 99); }},
      {"padding bits past the last slot cleared",
       [&](char* s, size_t h) { set(s, h + 48, get(s, h + 48) & ~(uint64_t{1} << 63)); }},
      {"a record fewer than the live pairs",
       [&](char* s, size_t h) {
         const uint64_t w = get(s, h + 40);
         set(s, h + 40, w & (w - 1));
       }},
  };
  for (const std::string kind : {"turbo-kv", "reh-kv", "smartht-kv", "pea-kv", "elimda-kv"}) {
    std::vector<Forgery> at_heap;
    for (const auto& f : forgeries) {
      at_heap.emplace_back(f.first, [&, kind, forge = f.second](char* s) {
        const size_t h = HeapSection(kind, s);
        ASSERT_GE(get(s, h), 2u) << "two slabs at least";
        ASSERT_EQ(get(s, h + 32), 1u) << "the 32 B class";
        forge(s, h);
      });
    }
    ExpectForgeriesWalk(kind, at_heap);
  }
}

// turbo.h I8: the load validates no record, so a live slot's record offset or record header
// forged after a clean Close is met by the operations: finds, updates, erases, ForEach and
// ForEachBytes read nothing outside the pool (Records::Fits) and free nothing they should not,
// a find of a key whose value runs past the pool answers (NotFound) instead of retrying the
// bucket forever, and CheckInvariants reports the records.
TEST(SavedStateTurboKv, ForgedRecordsAreBounded) {
  ScopedPath p("saved_forged_turbokv_records");
  auto oracle = MakeClosedPool(p.path(), "turbo-kv", 3000);
  {
    MappedFile f(p.path());
    ASSERT_NE(f.image(), nullptr);
    TurboShards t(f);
    const uint64_t forged[] = {
        uint64_t{1} << 40,  // past the pool
        f.size() - 8,       // a header at the pool's last word
        0,                  // (below: the record's own header, lengths past the pool)
        3,                  // (below: misaligned, +3)
        0,                  // (below: the value's length past the pool, the key intact)
    };
    constexpr int kForged = 5;
    int n = 0;
    for (uint32_t b = 0; b < t.buckets(0) && n < kForged; b++) {
      const uint64_t m = *t.meta(0, b);
      for (uint32_t c = (m & 0x3FFF) & ~((m >> 16) & 0x3FFF); c && n < kForged; c &= c - 1, n++) {
        auto* record = reinterpret_cast<uint64_t*>(f.base() + t.offset(0) + uint64_t{b} * 256 +
                                                   32 + 16 * std::countr_zero(c) + 8);
        if (n == 2) {
          *reinterpret_cast<uint64_t*>(f.base() + *record) = ~uint64_t{0} - 0xFF;  // lengths
        } else if (n == 4) {
          reinterpret_cast<uint32_t*>(f.base() + *record)[1] = ~uint32_t{0} - 0xFF;  // value_len
        } else if (n == 3) {
          *record += forged[n];
        } else {
          *record = forged[n];
        }
      }
    }
    ASSERT_EQ(n, kForged);
  }
  auto r = Open("turbo-kv", SmallOptions(p.path(), "turbo-kv"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Index& idx = **r;
  EXPECT_TRUE(idx.Stats().state_loaded);
  const Status inv = idx.CheckInvariants();
  EXPECT_TRUE(inv.IsCorruption()) << inv.ToString();
  uint64_t pairs = 0, bytes_pairs = 0;
  (void)idx.ForEach([&](Key, Value) { pairs++; });
  ASSERT_NE(idx.bytes(), nullptr);
  EXPECT_TRUE(
      idx.bytes()->ForEach([&](std::string_view, std::string_view) { bytes_pairs++; }).ok());
  EXPECT_EQ(bytes_pairs, oracle.size());
  EXPECT_GE(pairs, oracle.size() - 5);
  uint64_t found = 0, i = 0;
  for (const auto& [k, v] : oracle) {
    Value got = 0;
    if (idx.Find(k, &got).ok() && got == v) found++;
    (void)idx.Upsert(k, v + 1);
    if (i++ % 2 == 0) (void)idx.Erase(k);
  }
  EXPECT_EQ(found, oracle.size() - 5);
  idx.Abandon();
}

// record_heap.h, "Clean shutdown": a records kind's clean open validates no record, so a record
// whose lengths are forged after the Close (every record of the first slab the image names: its
// key and value 4 GiB each) is met by the operations: ForEach, the bytes ForEach, finds, updates
// and erases read nothing outside the pool (Records::Fits), and CheckInvariants reports it.
TEST(SavedStateRecords, ForgedRecordLengthsAreBounded) {
  for (const std::string kind : {"turbo-kv", "reh-kv", "smartht-kv", "pea-kv", "elimda-kv"}) {
    SCOPED_TRACE(kind);
    ScopedPath p("saved_forged_lengths");
    auto oracle = MakeClosedPool(p.path(), kind, 3000);
    uint64_t forged = 0;
    {
      MappedFile f(p.path());
      ASSERT_NE(f.image(), nullptr);
      const char* s = f.engine_section();
      const size_t heap = HeapSection(kind, s);
      uint64_t slabs = 0, slab = 0, cls = 0, bits[2] = {0, 0};
      std::memcpy(&slabs, s + heap, 8);
      ASSERT_GE(slabs, 1u);
      std::memcpy(&slab, s + heap + 24, 8);
      std::memcpy(&cls, s + heap + 32, 8);
      ASSERT_EQ(cls, 1u) << "the 32 B class of a 24 B record";
      std::memcpy(bits, s + heap + 40, 16);
      for (uint32_t k = 0; k < 126; k++) {
        if ((bits[k / 64] >> (k % 64)) & 1) {
          const uint64_t lengths = ~uint64_t{0};  // key_len and value_len 2^32 - 1
          std::memcpy(f.base() + slab + 64 + 32 * k, &lengths, 8);
          forged++;
        }
      }
    }
    ASSERT_GT(forged, 0u);
    auto r = Open(kind, SmallOptions(p.path(), kind));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Index& idx = **r;
    EXPECT_TRUE(idx.Stats().state_loaded);
    const Status inv = idx.CheckInvariants();
    EXPECT_TRUE(inv.IsCorruption()) << inv.ToString();
    uint64_t pairs = 0, bytes_pairs = 0;
    (void)idx.ForEach([&](Key, Value) { pairs++; });
    ASSERT_NE(idx.bytes(), nullptr);
    (void)idx.bytes()->ForEach([&](std::string_view, std::string_view) { bytes_pairs++; });
    EXPECT_EQ(pairs, oracle.size() - forged) << "a record that does not fit reads as empty";
    EXPECT_EQ(bytes_pairs, oracle.size());
    uint64_t found = 0, i = 0;
    for (const auto& [k, v] : oracle) {
      Value got = 0;
      if (idx.Find(k, &got).ok() && got == v) found++;
      (void)idx.Upsert(k, v + 1);
      if (i++ % 2 == 0) (void)idx.Erase(k);
    }
    EXPECT_EQ(found, oracle.size() - forged);
    idx.Abandon();
  }
}

// Every other registered kind opens by its walk after a clean Close (and says so).
TEST(SavedState, KindsThatDoNotSaveLoadNothing) {
  for (const IndexInfo& k : RegisteredIndexes()) {
    const std::string kind(k.name);
    if (std::find(SavingKinds().begin(), SavingKinds().end(), kind) != SavingKinds().end()) {
      continue;
    }
    SCOPED_TRACE(kind);
    ScopedPath p("saved_none");
    Options o = SmallOptions(p.path(), kind);
    {
      auto r = Open(kind, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_TRUE((*r)->Insert(1, 2).ok());
    }
    auto r = Open(kind, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE((*r)->Stats().state_loaded);
  }
}

}  // namespace
}  // namespace pmhash
