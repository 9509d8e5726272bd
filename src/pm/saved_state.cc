#include "pm/saved_state.h"

#include <xxhash.h>

#include <limits>

#include "pm/pool_format.h"

namespace pmhash::pm {

uint64_t SavedStateChecksum(uint64_t hash_seed, uint64_t create_time_ns,
                           const SavedStateHeader& h, const void* payload) {
  SavedStateHeader z = h;
  z.checksum = 0;
  const uint64_t ident[3] = {hash_seed, create_time_ns, XXH3_64bits(&z, sizeof(z))};
  return XXH3_64bits_withSeed(payload, h.payload_bytes, XXH3_64bits(ident, sizeof(ident)));
}

namespace {

uint64_t ImageChecksum(const Pool& pool, const SavedStateHeader& h, const char* payload) {
  return SavedStateChecksum(pool.hash_seed(), pool.create_time_ns(), h, payload);
}

}  // namespace

Status SaveStateImage(Pool& pool, const std::function<void(StateWriter&)>& save) {
  ChunkAllocator& alloc = pool.allocator();
  StateWriter count;
  save(count);
  // Room for the whole bitmap (wherever the image lands, the words in use fit), but only the
  // words up to the last used chunk, the image's own included, are written: a fraction of the
  // bitmap where the pool is larger than its data, so the checksum and the load at the next open
  // cost the heap in use, not the pool's size.
  const uint64_t chunks = (sizeof(SavedStateHeader) + alloc.bitmap_words() * sizeof(uint64_t) +
                           count.bytes() + alloc.chunk_size() - 1) /
                          alloc.chunk_size();
  if (chunks > std::numeric_limits<uint32_t>::max()) return Status::OK();  // S5: no image
  auto off = alloc.Allocate(static_cast<uint32_t>(chunks));
  if (!off.ok()) return Status::OK();  // S5: the next open walks
  const uint64_t words = alloc.UsedWords();
  const uint64_t payload = words * sizeof(uint64_t) + count.bytes();
  char* image = pool.base() + off.value();
  char* data = image + sizeof(SavedStateHeader);
  alloc.CopyBitmap(reinterpret_cast<uint64_t*>(data), words);  // the image's chunks set
  StateWriter w(data + words * sizeof(uint64_t), count.bytes());
  save(w);
  if (w.bytes() != count.bytes()) {  // the engine wrote another size the second time: no image
    alloc.Free(off.value(), static_cast<uint32_t>(chunks));
    return Status::OK();
  }
  SavedStateHeader h{};
  h.magic = kSavedStateMagic;
  h.payload_bytes = payload;
  h.chunks = chunks;
  h.allocator_words = words;
  h.checksum = ImageChecksum(pool, h, data);
  std::memcpy(image, &h, sizeof(h));
  pool.PersistRange(image, sizeof(SavedStateHeader) + payload);  // S1: the image, durable
  pool.SetSavedState(off.value());                               // then named (persisted)
  alloc.Free(off.value(), static_cast<uint32_t>(chunks));        // reachable from the header only
  return Status::OK();
}

bool LoadStateImage(Pool& pool, const std::function<Status(StateReader&)>& load) {
  ChunkAllocator& alloc = pool.allocator();
  const uint64_t off = pool.saved_state();
  bool loaded = false;
  if (!pool.created() && pool.was_clean() && off != 0 &&
      alloc.ValidChunk(off, (sizeof(SavedStateHeader) + alloc.chunk_size() - 1) /
                                alloc.chunk_size())) {
    SavedStateHeader h;
    std::memcpy(&h, pool.base() + off, sizeof(h));
    const uint64_t words = h.allocator_words;
    const uint64_t chunks_left = alloc.chunk_count() - alloc.ChunkIndex(off);
    // Every size bounded before it is used (S4): the image lies within the heap.
    const bool shape_ok =
        h.magic == kSavedStateMagic && words >= 1 && words <= alloc.bitmap_words() &&
        h.chunks >= 1 &&
        h.chunks <= chunks_left && h.chunks <= std::numeric_limits<uint32_t>::max() &&
        h.payload_bytes >= words * sizeof(uint64_t) &&
        h.payload_bytes <= h.chunks * alloc.chunk_size() - sizeof(SavedStateHeader);
    const char* data = pool.base() + off + sizeof(SavedStateHeader);
    if (shape_ok && ImageChecksum(pool, h, data) == h.checksum) {
      // Read in place: the image starts on a chunk, so its payload is 8-byte aligned.
      if (alloc.LoadBitmap(reinterpret_cast<const uint64_t*>(data), words)) {
        // The image's chunks are free from here on (nothing allocates during the load), so the
        // engine's accounting (used chunks == what its state names) holds without them.
        alloc.Free(off, static_cast<uint32_t>(h.chunks));
        StateReader r(data + words * sizeof(uint64_t), h.payload_bytes - words * sizeof(uint64_t));
        loaded = load(r).ok() && r.remaining() == 0;
      }
    }
  }
  if (!loaded) alloc.Reset();
  if (off != 0) pool.SetSavedState(0);  // S2: used once
  return loaded;
}

}  // namespace pmhash::pm
