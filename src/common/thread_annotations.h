// src/common/thread_annotations.h — clang -Wthread-safety attributes (no-ops elsewhere).
#pragma once

#if defined(__clang__)
#define PMHASH_TSA(x) __attribute__((x))
#else
#define PMHASH_TSA(x)
#endif

#define CAPABILITY(x) PMHASH_TSA(capability(x))
#define SCOPED_CAPABILITY PMHASH_TSA(scoped_lockable)
#define GUARDED_BY(x) PMHASH_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) PMHASH_TSA(pt_guarded_by(x))
#define REQUIRES(...) PMHASH_TSA(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) PMHASH_TSA(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) PMHASH_TSA(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) PMHASH_TSA(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) PMHASH_TSA(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) PMHASH_TSA(release_shared_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) PMHASH_TSA(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) PMHASH_TSA(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS PMHASH_TSA(no_thread_safety_analysis)
