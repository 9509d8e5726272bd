// bench/pool_files.h — the files that back benchmark pools.
//
// The benchmark needs a fresh pool per row. It owns one file per role (the measured rows, the
// counting pass), truncates it to zero bytes before each row (an empty file is created as a new
// pool by pmhash's OpenOrCreate mode, and truncation gives the memory back on tmpfs), and
// removes it at the end unless asked to keep it.
//
// Files are registered in a small fixed table so that a signal handler can remove them
// (RemoveRegisteredPoolFilesForSignal is async-signal-safe): a benchmark interrupted with ^C
// must not leave half a gigabyte behind in /dev/shm.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "pmhash/status.h"

namespace pmhash::bench {

// /dev/shm if it is a writable directory, else $TMPDIR, else /tmp.
std::string DefaultPoolDir();

class PoolFile {
 public:
  // A new, empty, uniquely named file (mkstemp) in `dir`: "<dir>/pmhash-<tag>-XXXXXX".
  static Result<std::unique_ptr<PoolFile>> CreateTemp(const std::string& dir, std::string_view tag);
  // The file at `path`, created empty if absent. An existing non-empty file is refused
  // (kInvalidArgument): the benchmark never overwrites data it did not create.
  static Result<std::unique_ptr<PoolFile>> CreateAt(const std::string& path);
  ~PoolFile();  // removes the file unless Keep() was called
  PoolFile(const PoolFile&) = delete;
  PoolFile& operator=(const PoolFile&) = delete;

  const std::string& path() const { return path_; }
  // Empties the file so the next pmhash open creates a fresh pool in it.
  Status Truncate();
  // Moves the current contents to `new_path` (rename) and recreates an empty file at path().
  Status MoveTo(const std::string& new_path);
  // Leave the file in place at destruction.
  void Keep();

 private:
  explicit PoolFile(std::string path);
  std::string path_;
  int slot_ = -1;  // registration for signal-time removal
  bool keep_ = false;
};

// Removes every registered pool file. Async-signal-safe (unlink only); for signal handlers.
void RemoveRegisteredPoolFilesForSignal();

}  // namespace pmhash::bench
