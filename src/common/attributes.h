// src/common/attributes.h — compiler attributes shared by every index.
#pragma once

// For a small function on an index's hot path that the compiler would otherwise leave out of line
// (a call between the directory lookup and the bucket read costs the overlap of one operation's
// cache misses with the next one's: REH's find lost a fifth of its speed that way).
#define PMHASH_ALWAYS_INLINE [[gnu::always_inline]] inline
// The same for a lambda, written after its parameter list: [&](int i) PMHASH_LAMBDA_INLINE {...}
#define PMHASH_LAMBDA_INLINE __attribute__((always_inline))
// A rare case of a hot function, kept out of line so that it does not crowd the hot path.
#define PMHASH_COLD [[gnu::noinline, gnu::cold]]

namespace pmhash {

// A prefetch of the line holding p into every cache level (prefetcht0) that the compiler keeps
// where it is written. GCC may drop a __builtin_prefetch of a line the same function goes on to
// load (Pea's find lost its bucket prefetch, and a fifth of its find+ speed, that way when its
// bucket search was inlined); an asm statement is never removed or moved across the loads.
PMHASH_ALWAYS_INLINE void PrefetchLine(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}

// The same with intent to write (prefetchw: the line arrives exclusive, so the store that follows
// needs no second request for ownership). A no-op on CPUs without it (Intel before Broadwell).
PMHASH_ALWAYS_INLINE void PrefetchLineForWrite(const void* p) {
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
}

}  // namespace pmhash
