// src/index/lifecycle.h — open / close / abandon, the same for every engine.
//
//   Close()    the clean shutdown: the engine's own quiescing (epoch drain, background work),
//              then the pool's clean-shutdown mark. Idempotent. Writes after it return
//              kInvalidArgument ("closed"); the pool stays mapped until destruction, so reads
//              still answer.
//   ~Engine()  closes, unless the engine was abandoned or already closed.
//   Abandon()  for crash tests and tools: the destructor then only releases DRAM and the
//              mapping, leaving the pool exactly as a crash at that instant would (no clean mark;
//              the next open recovers).
// REQUIRES (all three): no other call in flight on the engine.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#include "pm/pool.h"
#include "pmhash/status.h"

namespace pmhash::index {

class Lifecycle {
 public:
  bool closed() const { return closed_; }
  bool CloseOnDestroy() const { return !closed_ && !abandoned_; }
  void Abandon() { abandoned_ = true; }

  // `quiesce` (a Status or void callable) runs once, before the clean mark; a failure leaves
  // the pool unmarked (the next open recovers) and is returned.
  template <class Quiesce>
  Status Close(pm::Pool& pool, Quiesce&& quiesce) {
    if (closed_) return Status::OK();
    closed_ = true;
    PMHASH_RETURN_IF_ERROR(Run(quiesce));
    pool.MarkClean();
    return Status::OK();
  }

  // Calls f, a Status or void callable: its Status, or OK.
  template <class F>
  static Status Run(F&& f) {
    if constexpr (std::is_same_v<decltype(f()), Status>) {
      return f();
    } else {
      f();
      return Status::OK();
    }
  }

  static Status ClosedError(std::string_view kind) {
    return Status::InvalidArgument(std::string(kind) + ": the index is closed");
  }

 private:
  bool closed_ = false;
  bool abandoned_ = false;
};

}  // namespace pmhash::index
