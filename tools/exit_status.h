// tools/exit_status.h — the pmhash tool's exit statuses, and the two ways a command fails.
#pragma once

#include <iostream>

#include "pmhash/status.h"

namespace pmhash::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // the operation failed
inline constexpr int kExitUsage = 2;   // bad command line

// Print "pmhash: <status>" on stderr and return kExitFailed / kExitUsage.
inline int Fail(const Status& s) {
  std::cerr << "pmhash: " << s.ToString() << "\n";
  return kExitFailed;
}
inline int Usage(const Status& s) {
  std::cerr << "pmhash: " << s.ToString() << "\n";
  return kExitUsage;
}

}  // namespace pmhash::cli
