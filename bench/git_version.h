// bench/git_version.h — the commit this benchmark was built from (recorded at build time).
#pragma once

namespace pmhash::bench {
// Full SHA-1 of HEAD when the binary was built, or "unknown" (no git, not a work tree).
const char* GitCommit();
// True if tracked files differed from HEAD at build time.
bool GitDirty();
}  // namespace pmhash::bench
