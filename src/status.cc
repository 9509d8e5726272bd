#include "pmhash/status.h"

#include "pmhash/options.h"

namespace pmhash {

std::string_view Status::CodeName(Code c) {
  switch (c) {
    case Code::kOk:
      return "OK";
    case Code::kNotFound:
      return "NotFound";
    case Code::kExists:
      return "Exists";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kCorruption:
      return "Corruption";
    case Code::kIOError:
      return "IOError";
    case Code::kOutOfSpace:
      return "OutOfSpace";
    case Code::kBusy:
      return "Busy";
    case Code::kNotSupported:
      return "NotSupported";
    case Code::kOutOfMemory:
      return "OutOfMemory";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  std::string s(CodeName(code_));
  if (msg_) s += ": " + *msg_;
  return s;
}

std::string_view DurabilityName(Durability d) {
  switch (d) {
    case Durability::kDram:
      return "dram";
    case Durability::kAdr:
      return "adr";
    case Durability::kEadr:
      return "eadr";
    case Durability::kSim:
      return "sim";
  }
  return "?";
}

bool ParseDurability(std::string_view s, Durability* out) {
  for (Durability d : {Durability::kDram, Durability::kAdr, Durability::kEadr, Durability::kSim}) {
    if (s == DurabilityName(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

}  // namespace pmhash
