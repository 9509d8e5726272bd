#include "bench/persist_probe.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "bench/keys.h"
#include "pm/persist.h"

namespace pmhash::bench {

namespace {

template <class Policy>
void ProbeLoop(char* base, uint64_t lines, uint64_t n, uint64_t seed) {
  SplitMix64 rng(seed);
  for (uint64_t i = 0; i < n; i++) {
    auto* line = reinterpret_cast<volatile uint64_t*>(base + rng.Below(lines) * pm::kCacheLine);
    *line = i;
    Policy::Flush(const_cast<const uint64_t*>(line), sizeof(uint64_t));
    Policy::Fence();
  }
}

}  // namespace

PersistProbeResult RunPersistProbe(const std::string& path, uint64_t region_bytes, Durability d,
                                   const RunnerOptions& ro, uint64_t ops, uint64_t seed) {
  PersistProbeResult r;
  r.durability = d;
  r.threads = ro.threads;
  r.region_bytes = region_bytes;
  if (d != Durability::kAdr && d != Durability::kEadr) {
    r.failure = Status::InvalidArgument("the persist probe needs a persistent durability mode");
    return r;
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    r.failure = Status::IOError("persist probe: open " + path + ": " + std::strerror(errno));
    return r;
  }
  if (ftruncate(fd, static_cast<off_t>(region_bytes)) != 0) {
    r.failure = Status::IOError("persist probe: ftruncate " + path + ": " + std::strerror(errno));
    close(fd);
    return r;
  }
  void* p = mmap(nullptr, region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    r.failure = Status::IOError("persist probe: mmap " + path + ": " + std::strerror(errno));
    close(fd);
    return r;
  }
  char* base = static_cast<char*>(p);
  std::memset(base, 0, region_bytes);  // fault every page in before timing

  const uint64_t lines = region_bytes / pm::kCacheLine;
  const PhaseSpec spec = KeyPhase("persist", Op::kUpdate, {});
  const PhaseResult pr = RunOnThreads(spec, ro, [&](int t, ThreadOutcome* out) {
    const uint64_t n = ops / static_cast<uint64_t>(ro.threads);
    const uint64_t s = Mixer::Finalize(seed + static_cast<uint64_t>(t));
    if (d == Durability::kAdr) {
      ProbeLoop<pm::Adr>(base, lines, n, s);
    } else {
      ProbeLoop<pm::Eadr>(base, lines, n, s);
    }
    out->ops = n;
  });
  r.ops = pr.ops;
  r.seconds = pr.seconds;
  r.failure = pr.failure;
  munmap(p, region_bytes);
  if (ftruncate(fd, 0) != 0 && r.failure.ok()) {
    r.failure = Status::IOError("persist probe: truncate " + path + ": " + std::strerror(errno));
  }
  close(fd);
  return r;
}

}  // namespace pmhash::bench
