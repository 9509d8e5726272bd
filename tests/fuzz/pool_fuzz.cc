// tests/fuzz/pool_fuzz.cc — libFuzzer target: recovery of corrupt pool images, every index kind.
//
// The contract under test (README, "Durability promise"): a corrupt pool is refused with a Status
// or opens into something every operation can run on; never a crash, an out-of-bounds access,
// undefined behaviour, a hang or a leak. Built with clang only (-fsanitize=fuzzer,address,
// undefined); see docs/durability.md, "Fuzzing recovery".
//
// Input: not a raw pool image (the header checksum would refuse nearly every mutation before an
// index sees it) but a list of patches to a valid seed image, which is built in-process, once per
// (kind, hash mode), by running a few hundred operations on a small-geometry pool
// (tests/crash/crash_indexes.h) so that splits, directory doublings, stashes, rehashes and records
// exist. After patching, the header checksum is recomputed (unless the input says not to), so
// mutations reach index recovery.
//
//   byte 0      selector: kind = s % kinds, hash mode = (s / kinds) % 2 (strong, collide)
//   byte 1      flags: bit 0 keep the stale checksums; bit 1 truncate the image (see below);
//               bit 2 persistent: the seed is built, closed and reopened with the adr policy, so
//               the clean Close saved its DRAM-state image (src/pm/saved_state.h; REH), which
//               the patches reach like any other words, and whose checksum is recomputed after
//               them too (unless bit 0) so that they reach the engine's LoadState
//   then        11-byte patches: op (1), where (2, little-endian), value (8, little-endian)
//
// A patch picks an 8-byte word of the image and changes it. Its target (op & 3):
//   0  the where-th non-zero word of the seed image (headers, roots, directory entries, chain
//      links, meta words, records: the words that hold structure), modulo their count;
//   1  the word at byte offset 8 * where (any word of the pool, zero chunks included);
//   2  a word near a non-zero one: the where-th non-zero word, plus (int8)(value >> 56) words;
//   3  like 0.
// and its operation (op >> 2, modulo 8):
//   0  set to value             1  flip bit value & 63    2  add (int8)value
//   3  low 48 bits := the offset of the value-th non-zero word, high 16 bits kept (a link to
//      another structure, keeping a depth or count packed above it)
//   4  copy the value-th non-zero word (duplicates: two owners of one chunk, one key twice)
//   5  high 16 bits := value     6  byte (value & 7) := value >> 8   7  set bit value & 63
// Truncation (flag bit 1): the file is cut to the byte offset in the last 3 bytes of the input.
//
// Each run writes the image to a file under $TMPDIR (else /dev/shm, else /tmp), opens it through
// the registry with the Dram policy (adr with flag bit 2), and if the open succeeds runs CheckInvariants, ForEach, a few
// dozen Find/Insert/Upsert/Erase (and the bytes API of the kinds with variable-size keys, the
// multi-value API of pea-multi: FindAll, Count, Insert, Erase of a pair, EraseAll), Close; a clean
// close is reopened and checked once more. The seed image of a multi-value kind also has four hot
// keys with dozens of values each (value buffers, chain nodes, compacted buckets, an emptied list).
//
// `pool_fuzz --list-kinds` prints the kinds, one a line. Seed corpus:
// `pool_fuzz --generate-corpus=DIR` writes DIR/<kind>/: for each hash mode, the empty patch list,
// single patches spread over the seed image, and structure-breaking patches on its structure
// words (GenerateCorpus); then exits.
// PMHASH_FUZZ_KIND=<name> pins every input to one kind (the selector's kind bits are ignored).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "crash/crash_indexes.h"
#include "pm/pool_format.h"
#include "pm/saved_state.h"
#include "pmhash/pmhash.h"

namespace pmhash::fuzz {
namespace {

constexpr uint64_t kPoolSize = 256 << 10;
constexpr uint64_t kHashSeed = 0x243f6a8885a308d3ULL;  // fixed: seed images are reproducible
constexpr uint64_t kSeedKeys = 300;
constexpr size_t kPatchBytes = 11;
constexpr uint64_t kHotValues = 60;  // multi-value kinds: values of each of 4 hot keys

struct Kind {
  std::string_view name;
  Options (*small)(HashMode);
};

// Every index of crash_indexes.h, in its order (a new index there is fuzzed without an edit here).
const std::vector<Kind>& Kinds() {
  static const std::vector<Kind> kKinds = [] {
    std::vector<Kind> v;
    std::apply([&](auto... t) { (v.push_back({decltype(t)::kName, &decltype(t)::Small}), ...); },
               crashtest::AllIndexes{});
    return v;
  }();
  return kKinds;
}

Options FuzzOptions(const Kind& kind, HashMode mode, bool persistent, const std::string& path) {
  Options o = kind.small(mode);
  o.path = path;
  o.pool_size = kPoolSize;
  o.durability = persistent ? Durability::kAdr : Durability::kDram;
  o.hash_seed = kHashSeed;
  // A hostile pool may ask for a directory as large as the budget: keep each run small and fast.
  o.max_directory_bytes = 1 << 20;
  return o;
}

std::string PoolPath() {
  std::string dir = "/tmp";
  if (const char* t = std::getenv("TMPDIR"); t && *t) {
    dir = t;
  } else if (access("/dev/shm", W_OK) == 0) {
    dir = "/dev/shm";
  }
  return dir + "/pmhash_fuzz." + std::to_string(getpid()) + ".pool";
}

const std::string& ThePath() {
  static const std::string kPath = PoolPath();
  return kPath;
}

bool WriteImage(const std::string& path, const uint8_t* p, size_t n) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = true;
  for (size_t done = 0; done < n && ok;) {
    const ssize_t w = ::write(fd, p + done, n - done);
    ok = w > 0;
    if (ok) done += static_cast<size_t>(w);
  }
  ::close(fd);
  return ok;
}

std::vector<uint8_t> ReadImage(const std::string& path) {
  std::vector<uint8_t> img;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return img;
  struct stat st;
  if (fstat(fd, &st) == 0) {
    img.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < img.size()) {
      const ssize_t r = ::read(fd, img.data() + done, img.size() - done);
      if (r <= 0) break;
      done += static_cast<size_t>(r);
    }
    img.resize(done);
  }
  ::close(fd);
  return img;
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "pool_fuzz: %s\n", what.c_str());
  std::abort();
}

std::string BytesKey(uint64_t i) { return "key-" + std::to_string(i) + std::string(i % 23, 'k'); }

// A valid pool of this kind after growth, and the offsets of its non-zero words.
struct Seed {
  std::vector<uint8_t> image;
  std::vector<uint32_t> words;  // byte offsets of the non-zero 8-byte words
};

Seed BuildSeed(const Kind& kind, HashMode mode, bool persistent) {
  const std::string& path = ThePath();
  ::unlink(path.c_str());
  {
    Options o = FuzzOptions(kind, mode, persistent, path);
    o.mode = OpenMode::kCreateExclusive;
    auto r = Open(kind.name, o);
    if (!r.ok()) Die("seed " + std::string(kind.name) + ": " + r.status().ToString());
    Index& ix = **r;
    for (uint64_t k = 0; k < kSeedKeys; k++) {
      if (Status s = ix.Insert(k, k * 3 + 1); !s.ok()) Die("seed insert: " + s.ToString());
    }
    for (uint64_t k = 0; k < kSeedKeys; k += 7) (void)ix.Erase(k);  // tombstones, deleted items
    for (uint64_t k = 1; k < kSeedKeys; k += 11) (void)ix.Update(k, k);
    if (BytesApi* kv = ix.bytes()) {  // records of many sizes
      for (uint64_t i = 0; i < 40; i++) (void)kv->Insert(BytesKey(i), std::string(i * 5, 'v'));
      for (uint64_t i = 0; i < 40; i += 5) (void)kv->Erase(BytesKey(i));
    }
    if (MultiApi* mv = ix.multi()) {  // hot keys: compactions, value buffers, chain nodes
      for (uint64_t i = 0; i < 4 * kHotValues; i++) (void)mv->Insert(i % 4, i);
      for (uint64_t i = 0; i < 4 * kHotValues; i += 9) (void)mv->Erase(i % 4, i);
      (void)mv->EraseAll(3);  // an emptied list head (kept until the next compaction)
    }
    if (Status s = ix.CheckInvariants(); !s.ok()) Die("seed invariants: " + s.ToString());
    if (Status s = ix.Close(); !s.ok()) Die("seed close: " + s.ToString());
  }
  Seed seed;
  seed.image = ReadImage(path);
  ::unlink(path.c_str());
  if (seed.image.size() != kPoolSize) Die("seed image has the wrong size");
  for (uint32_t off = 0; off + 8 <= seed.image.size(); off += 8) {
    uint64_t w;
    std::memcpy(&w, &seed.image[off], 8);
    if (w != 0) seed.words.push_back(off);
  }
  return seed;
}

const Seed& SeedFor(size_t kind, HashMode mode, bool persistent) {
  static std::vector<std::array<std::unique_ptr<Seed>, 4>> seeds(Kinds().size());
  auto& s = seeds[kind][(static_cast<size_t>(mode) & 1) | (persistent ? 2 : 0)];
  if (!s) s = std::make_unique<Seed>(BuildSeed(Kinds()[kind], mode, persistent));
  return *s;
}

// The DRAM-state image the header names, if its header and payload lie in the image (else 0).
uint64_t SavedImageOffset(const std::vector<uint8_t>& img) {
  uint64_t off;
  std::memcpy(&off, &img[offsetof(pm::PoolHeader, saved_state)], 8);
  if (off == 0 || off > img.size() || img.size() - off < sizeof(pm::SavedStateHeader)) return 0;
  pm::SavedStateHeader h;
  std::memcpy(&h, &img[off], sizeof(h));
  if (h.payload_bytes > img.size() - off - sizeof(h)) return 0;
  return off;
}

// Recomputes the checksum of the DRAM-state image the header names, as a hostile file would.
void ResealSavedImage(std::vector<uint8_t>& img) {
  const uint64_t off = SavedImageOffset(img);
  if (off == 0) return;
  uint64_t seed, created;
  std::memcpy(&seed, &img[offsetof(pm::PoolHeader, hash_seed)], 8);
  std::memcpy(&created, &img[offsetof(pm::PoolHeader, create_time_ns)], 8);
  pm::SavedStateHeader h;
  std::memcpy(&h, &img[off], sizeof(h));
  h.checksum = pm::SavedStateChecksum(seed, created, h, &img[off + sizeof(h)]);
  std::memcpy(&img[off], &h, sizeof(h));
}

std::optional<size_t> PinnedKind() {
  const char* pin = std::getenv("PMHASH_FUZZ_KIND");
  if (!pin || !*pin) return std::nullopt;
  for (size_t i = 0; i < Kinds().size(); i++) {
    if (Kinds()[i].name == pin) return i;
  }
  Die("PMHASH_FUZZ_KIND=" + std::string(pin) + " is no index kind");
}

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

void ApplyPatch(const Seed& seed, std::vector<uint8_t>& img, const uint8_t* p) {
  const uint8_t op = p[0];
  const uint32_t where = p[1] | (uint32_t{p[2]} << 8);
  const uint64_t value = Load64(p + 3);
  const auto& words = seed.words;
  uint64_t off = 0;
  switch (op & 3) {
    case 1:
      off = (uint64_t{where} * 8) % img.size();
      break;
    case 2: {
      const int64_t at = static_cast<int64_t>(words[where % words.size()]) +
                         8 * int64_t{static_cast<int8_t>(value >> 56)};
      if (at < 0 || static_cast<uint64_t>(at) + 8 > img.size()) return;
      off = static_cast<uint64_t>(at);
      break;
    }
    default:
      off = words[where % words.size()];
      break;
  }
  uint64_t w = Load64(&img[off]);
  const uint64_t other = words[value % words.size()];
  switch ((op >> 2) & 7) {
    case 0: w = value; break;
    case 1: w ^= uint64_t{1} << (value & 63); break;
    case 2: w += static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(value))); break;
    case 3: w = (w & ~((uint64_t{1} << 48) - 1)) | other; break;
    case 4: w = Load64(&seed.image[other]); break;
    case 5: w = (w & ((uint64_t{1} << 48) - 1)) | (value << 48); break;
    case 6: {
      const int b = static_cast<int>(value & 7);
      w = (w & ~(uint64_t{0xFF} << (8 * b))) | (((value >> 8) & 0xFF) << (8 * b));
      break;
    }
    case 7: w |= uint64_t{1} << (value & 63); break;
  }
  std::memcpy(&img[off], &w, 8);
}

// Runs operations on an index that opened; every Status is acceptable.
void Exercise(Index& ix, const uint8_t* data, size_t size) {
  (void)ix.CheckInvariants();
  uint64_t n = 0;
  (void)ix.ForEach([&](Key, Value) { n++; });
  (void)ix.Size();
  (void)ix.Stats();
  // Keys: the seed's, and a few drawn from the input (any bytes make a key).
  uint64_t salt = 0x9e3779b97f4a7c15ULL;
  for (size_t i = 0; i + 8 <= size && i < 64; i += 8) salt ^= Load64(data + i) * (i + 1);
  Value v = 0;
  for (uint64_t k = 0; k < kSeedKeys; k += 9) (void)ix.Find(k, &v);
  for (uint64_t i = 0; i < 48; i++) {
    const Key k = (i % 3 == 0) ? salt + i : kSeedKeys + i;
    (void)ix.Insert(k, i);
  }
  for (uint64_t k = 2; k < kSeedKeys; k += 13) (void)ix.Upsert(k, k + 5);
  for (uint64_t k = 3; k < kSeedKeys; k += 10) (void)ix.Erase(k);
  for (uint64_t k = 0; k < 64; k++) (void)ix.Find(kSeedKeys + k, &v);
  if (BytesApi* kv = ix.bytes()) {
    std::string out;
    for (uint64_t i = 0; i < 40; i += 3) (void)kv->Find(BytesKey(i), &out);
    for (uint64_t i = 40; i < 60; i++) (void)kv->Insert(BytesKey(i), std::string(i, 'w'));
    for (uint64_t i = 1; i < 40; i += 4) (void)kv->Erase(BytesKey(i));
    (void)kv->ForEach([&](std::string_view, std::string_view) { n++; });
  }
  if (MultiApi* mv = ix.multi()) {  // the value lists: read, append to, erase from, drop
    std::vector<Value> vals;
    for (Key k = 0; k < 6; k++) {
      (void)mv->FindAll(k, &vals);
      (void)mv->Count(k);
      (void)mv->ForEachValue(k, [&](Value) { n++; });
    }
    for (uint64_t i = 0; i < 40; i++) (void)mv->Insert(i % 3, salt + i);
    for (uint64_t i = 1; i < 4 * kHotValues; i += 7) (void)mv->Erase(i % 4, i);
    (void)mv->EraseAll(1);
    (void)mv->ForEach([&](Key, Value) { n++; });
    (void)mv->Size();
  }
  (void)ix.ForEach([&](Key, Value) { n++; });
  (void)ix.CheckInvariants();
}

void RunOne(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const size_t kinds = Kinds().size();
  static const std::optional<size_t> pinned = PinnedKind();
  const size_t kind = pinned ? *pinned : data[0] % kinds;
  const HashMode mode = (data[0] / kinds) % 2 ? HashMode::kCollide : HashMode::kStrong;
  const uint8_t flags = data[1];
  const bool persistent = (flags & 4) != 0;
  const Seed& seed = SeedFor(kind, mode, persistent);

  std::vector<uint8_t> img = seed.image;
  const uint8_t* patches = data + 2;
  const size_t npatches = std::min<size_t>((size - 2) / kPatchBytes, 64);
  for (size_t i = 0; i < npatches; i++) ApplyPatch(seed, img, patches + kPatchBytes * i);
  if (!(flags & 1)) {
    auto* h = reinterpret_cast<pm::PoolHeader*>(img.data());
    h->checksum = pm::HeaderChecksum(img.data());
    ResealSavedImage(img);
  }
  size_t len = img.size();
  if ((flags & 2) && size >= 5) {
    len = (data[size - 3] | (size_t{data[size - 2]} << 8) | (size_t{data[size - 1]} << 16)) %
          (img.size() + 1);
  }

  const std::string& path = ThePath();
  if (!WriteImage(path, img.data(), len)) Die("cannot write " + path);
  Options o = FuzzOptions(Kinds()[kind], mode, persistent, path);
  o.mode = OpenMode::kOpenExisting;
  bool reopen = false;
  {
    auto r = Open(Kinds()[kind].name, o);
    if (r.ok()) {
      Exercise(**r, data, size);
      reopen = (*r)->Close().ok();
    }
  }
  if (reopen) {
    auto r = Open(Kinds()[kind].name, o);
    if (r.ok()) {
      (void)(*r)->CheckInvariants();
      Value v;
      for (uint64_t k = 0; k < kSeedKeys; k += 17) (void)(*r)->Find(k, &v);
      (void)(*r)->Close();
    }
  }
}

// Structure words of a seed image: links (a pool offset, 64 B-aligned, past the header) and
// packed words (a small offset or id in the low 48 bits under a depth, count or strategy in the
// high 16: REH bucket headers, Pea directory entries and descriptors, Turbo shard words).
bool IsStructureWord(uint64_t w) {
  const uint64_t low = w & ((uint64_t{1} << 48) - 1);
  if ((w >> 48) == 0) return low >= pm::kHeaderBytes && low < kPoolSize && low % 64 == 0;
  return low < kPoolSize;
}

// The seed corpus, one directory per kind: for each hash mode, no patch; single patches of each
// target and operation on words spread over the image; and, on up to 48 structure words, the
// mutations that break structure (a depth or strategy byte changed, a link moved to another
// structure word, an offset nudged).
void GenerateCorpus(const std::string& dir) {
  ::mkdir(dir.c_str(), 0755);
  const size_t kinds = Kinds().size();
  int files = 0;
  for (size_t kind = 0; kind < kinds; kind++) {
    const std::string kdir = dir + "/" + std::string(Kinds()[kind].name);
    ::mkdir(kdir.c_str(), 0755);
    for (int m = 0; m < 2; m++) {
      const uint8_t sel = static_cast<uint8_t>(kind + kinds * static_cast<size_t>(m));
      const std::string base = kdir + (m ? "/collide" : "/strong");
      auto emit = [&](uint8_t op, uint32_t where, uint64_t value, const std::string& name,
                      uint8_t flags = 0) {
        std::vector<uint8_t> in = {sel, flags, op, static_cast<uint8_t>(where),
                                   static_cast<uint8_t>(where >> 8)};
        for (int b = 0; b < 8; b++) in.push_back(static_cast<uint8_t>(value >> (8 * b)));
        const std::string path = base + "-" + name;
        if (!WriteImage(path, in.data(), in.size())) Die("cannot write " + path);
        files++;
      };
      const uint8_t intact[2] = {sel, 0};
      if (!WriteImage(base + "-intact", intact, 2)) Die("cannot write " + base + "-intact");
      files++;
      const Seed& seed = SeedFor(kind, m ? HashMode::kCollide : HashMode::kStrong, false);
      const size_t nw = seed.words.size();
      for (int i = 0; i < 24; i++) {
        // Non-zero words spread over the image; the ops cycle (set, flip, add, link, copy, ...).
        const uint32_t where = static_cast<uint32_t>((nw * static_cast<size_t>(i)) / 24);
        const uint8_t op = static_cast<uint8_t>(((i % 8) << 2) | (i % 3 == 2 ? 2 : 0));
        const uint64_t value = static_cast<uint64_t>(i) * 0x0101010101010101ULL;
        emit(op, where, value, "spread" + std::to_string(i));
      }
      std::vector<uint32_t> structure;  // indexes into seed.words
      for (uint32_t i = 0; i < nw; i++) {
        if (IsStructureWord(Load64(&seed.image[seed.words[i]]))) structure.push_back(i);
      }
      // Persistent seeds whose clean Close saved a DRAM-state image: the image intact, and
      // single patches over its words (resealed: they reach the engine's LoadState).
      const Seed& pseed = SeedFor(kind, m ? HashMode::kCollide : HashMode::kStrong, true);
      if (const uint64_t ioff = SavedImageOffset(pseed.image); ioff != 0) {
        const uint8_t pintact[2] = {sel, 4};
        if (!WriteImage(base + "-adr-intact", pintact, 2)) Die("cannot write " + base);
        files++;
        std::vector<uint32_t> in_image;  // indexes into pseed.words
        for (uint32_t i = 0; i < pseed.words.size(); i++) {
          if (pseed.words[i] >= ioff) in_image.push_back(i);
        }
        for (size_t i = 0; i < 24 && !in_image.empty(); i++) {
          const uint32_t where = in_image[i * in_image.size() / 24];
          const uint8_t op = static_cast<uint8_t>((i % 8) << 2);
          const uint64_t value = static_cast<uint64_t>(i + 1) * 0x0001000100010001ULL;
          emit(op, where, value, "adr-image" + std::to_string(i), 4);
        }
      }
      const size_t ns = std::min<size_t>(structure.size(), 48);
      for (size_t j = 0; j < ns; j++) {
        const uint32_t where = structure[j * structure.size() / ns];
        const uint64_t w = Load64(&seed.image[seed.words[where]]);
        const uint32_t other = structure[(j * structure.size() / ns + 1) % structure.size()];
        const std::string n = "w" + std::to_string(where);
        emit(3 << 2, where, other, n + "-link");  // low 48 bits := another structure word
        emit(2 << 2, where, static_cast<uint64_t>(-64), n + "-back");  // add -64
        if ((w >> 48) != 0) {
          const uint64_t b6 = (w >> 48) & 0xFF, b7 = w >> 56;
          emit(6 << 2, where, 6 | ((b6 + 1) & 0xFF) << 8, n + "-depth");  // byte 6 += 1
          emit(6 << 2, where, 7 | ((b7 ^ 2) & 0xFF) << 8, n + "-top");    // byte 7 ^= 2
        }
      }
    }
  }
  std::fprintf(stderr, "pool_fuzz: wrote %d seed inputs to %s\n", files, dir.c_str());
}

void CheckKindsCoverRegistry() {
  for (const IndexInfo& info : RegisteredIndexes()) {
    const bool found = std::any_of(Kinds().begin(), Kinds().end(),
                                   [&](const Kind& k) { return k.name == info.name; });
    if (!found) {
      Die("index '" + std::string(info.name) +
          "' is registered but missing from tests/crash/crash_indexes.h (AllIndexes)");
    }
  }
}

}  // namespace
}  // namespace pmhash::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  using namespace pmhash::fuzz;
  CheckKindsCoverRegistry();
  constexpr std::string_view kGenerate = "--generate-corpus=";
  for (int i = 1; i < *argc; i++) {
    const std::string_view arg = (*argv)[i];
    if (arg == "--list-kinds") {
      for (const Kind& k : Kinds()) {
        std::printf("%.*s\n", static_cast<int>(k.name.size()), k.name.data());
      }
      std::exit(0);
    }
    if (arg.starts_with(kGenerate)) {
      GenerateCorpus(std::string(arg.substr(kGenerate.size())));
      std::exit(0);
    }
  }
  // ThePath()'s string first: statics are destroyed in the reverse order of their construction
  // and atexit registration, so the handler must be registered after the string exists (it ran
  // on a destroyed string before, and every run left its pool file behind).
  (void)ThePath();
  std::atexit([] { ::unlink(ThePath().c_str()); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pmhash::fuzz::RunOne(data, size);
  return 0;
}
