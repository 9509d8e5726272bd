// src/common/thread_annotations.h — clang -Wthread-safety attributes (no-ops elsewhere).
#pragma once

#if defined(__clang__)
#define PMHASH_TSA(x) __attribute__((x))
#else
#define PMHASH_TSA(x)
#endif

#define PMHASH_CAPABILITY(x) PMHASH_TSA(capability(x))
#define PMHASH_SCOPED_CAPABILITY PMHASH_TSA(scoped_lockable)
#define PMHASH_GUARDED_BY(x) PMHASH_TSA(guarded_by(x))
#define PMHASH_PT_GUARDED_BY(x) PMHASH_TSA(pt_guarded_by(x))
#define PMHASH_REQUIRES(...) PMHASH_TSA(requires_capability(__VA_ARGS__))
#define PMHASH_REQUIRES_SHARED(...) PMHASH_TSA(requires_shared_capability(__VA_ARGS__))
#define PMHASH_ACQUIRE(...) PMHASH_TSA(acquire_capability(__VA_ARGS__))
#define PMHASH_ACQUIRE_SHARED(...) PMHASH_TSA(acquire_shared_capability(__VA_ARGS__))
#define PMHASH_RELEASE(...) PMHASH_TSA(release_capability(__VA_ARGS__))
#define PMHASH_RELEASE_SHARED(...) PMHASH_TSA(release_shared_capability(__VA_ARGS__))
#define PMHASH_TRY_ACQUIRE(...) PMHASH_TSA(try_acquire_capability(__VA_ARGS__))
#define PMHASH_EXCLUDES(...) PMHASH_TSA(locks_excluded(__VA_ARGS__))
#define PMHASH_NO_THREAD_SAFETY_ANALYSIS PMHASH_TSA(no_thread_safety_analysis)
