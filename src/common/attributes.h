// src/common/attributes.h — compiler attributes shared by every index.
#pragma once

// For a small function on an index's hot path that the compiler would otherwise leave out of line
// (a call between the directory lookup and the bucket read costs the overlap of one operation's
// cache misses with the next one's: REH's find lost a fifth of its speed that way).
#define PMHASH_ALWAYS_INLINE [[gnu::always_inline]] inline
