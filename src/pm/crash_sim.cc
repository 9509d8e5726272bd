#include "pm/crash_sim.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

namespace pmhash::pm {

CrashSimulator::CrashSimulator(Config config) : config_(config) {}

void CrashSimulator::OnMap(void* base, size_t len) {
  std::lock_guard<std::mutex> g(mu_);
  base_ = static_cast<char*>(base);
  size_ = len;
  persisted_.assign(base_, base_ + len);
  pending_.clear();
  stored_.clear();
}

void CrashSimulator::OnUnmap(void* base, size_t) {
  std::lock_guard<std::mutex> g(mu_);
  if (base == base_) {
    base_ = nullptr;
    size_ = 0;
    persisted_.clear();
    pending_.clear();
    stored_.clear();
  }
}

CrashSimulator::Pending& CrashSimulator::MyPending() {
  return pending_[std::this_thread::get_id()];
}

void CrashSimulator::SnapshotLines(const void* addr, size_t len) {
  if (!base_ || len == 0) return;
  const char* p = static_cast<const char*>(addr);
  if (p < base_ || p >= base_ + size_) return;  // not the simulated pool
  const size_t first = static_cast<size_t>(p - base_) / kLine;
  const size_t last =
      std::min((static_cast<size_t>(p - base_) + len - 1) / kLine, size_ / kLine - 1);
  std::lock_guard<std::mutex> g(mu_);
  Pending& pend = MyPending();
  for (size_t l = first; l <= last; l++) {
    Version v{seq_++, {}};
    std::memcpy(v.bytes.data(), base_ + l * kLine, kLine);
    std::vector<Version>& snaps = pend[l];
    if (snaps.empty() || snaps.back().bytes != v.bytes) snaps.push_back(v);
  }
}

void CrashSimulator::OnFlush(const void* addr, size_t len) { SnapshotLines(addr, len); }

void CrashSimulator::OnStore(const void* addr, size_t len) {
  if (config_.eadr) {
    CrashPoint();  // the image is memory as it is now: a crash right after this store
    return;
  }
  if (!base_ || len == 0) return;
  const char* p = static_cast<const char*>(addr);
  if (p < base_ || p >= base_ + size_) return;
  const size_t first = static_cast<size_t>(p - base_) / kLine;
  const size_t last =
      std::min((static_cast<size_t>(p - base_) + len - 1) / kLine, size_ / kLine - 1);
  std::lock_guard<std::mutex> g(mu_);
  for (size_t l = first; l <= last; l++) {
    Version v{seq_++, {}};
    std::memcpy(v.bytes.data(), base_ + l * kLine, kLine);
    std::vector<Version>& h = stored_[l];
    if (!h.empty() && h.back().bytes == v.bytes) continue;
    if (h.size() >= kMaxHistory) h.erase(h.begin());
    h.push_back(v);
  }
}
void CrashSimulator::OnNtCopy(void* dst, size_t len) { SnapshotLines(dst, len); }

void CrashSimulator::OnFence() {
  bool has_pending;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = pending_.find(std::this_thread::get_id());
    has_pending = it != pending_.end() && !it->second.empty();
  }
  // Under eADR every fence orders; under ADR only fences that make something durable matter.
  if (has_pending || config_.eadr) CrashPoint();
  std::lock_guard<std::mutex> g(mu_);
  auto it = pending_.find(std::this_thread::get_id());
  if (it == pending_.end()) return;
  for (const auto& [line, snaps] : it->second) {
    const Version& committed = snaps.back();
    std::memcpy(persisted_.data() + line * kLine, committed.bytes.data(), kLine);
    // The media now holds this snapshot or a later version: older stored versions are gone.
    auto h = stored_.find(line);
    if (h == stored_.end()) continue;
    std::erase_if(h->second, [&](const Version& v) { return v.seq < committed.seq; });
    if (h->second.empty()) stored_.erase(h);
  }
  it->second.clear();
}

void CrashSimulator::CrashPoint() {
  const uint64_t point = points_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (callback_ && base_) callback_(point);
}

CrashSimulator::State CrashSimulator::Capture() const {
  std::lock_guard<std::mutex> g(mu_);
  State s;
  s.point = points_.load(std::memory_order_relaxed);
  s.eadr = config_.eadr;
  s.tear_words = config_.tear_words;
  if (config_.eadr) {
    // The only image: current memory.
    s.persisted.assign(base_, base_ + size_);
    return s;
  }
  s.persisted = persisted_;
  // Candidates per line: pending snapshots of every thread, then the current bytes.
  std::map<size_t, std::vector<LineBytes>> cand;
  for (const auto& [tid, pend] : pending_) {
    for (const auto& [line, snaps] : pend) {
      for (const Version& v : snaps) cand[line].push_back(v.bytes);
    }
  }
  for (const auto& [line, versions] : stored_) {
    for (const Version& v : versions) cand[line].push_back(v.bytes);
  }
  const size_t lines = size_ / kLine;
  for (size_t l = 0; l < lines; l++) {
    const char* cur = base_ + l * kLine;
    if (std::memcmp(cur, persisted_.data() + l * kLine, kLine) != 0) {
      LineBytes b;
      std::memcpy(b.data(), cur, kLine);
      cand[l].push_back(b);
    }
  }
  for (auto& [line, versions] : cand) {
    State::Line L{line, {}};
    const char* pers = persisted_.data() + line * kLine;
    for (const auto& v : versions) {
      if (std::memcmp(v.data(), pers, kLine) == 0) continue;
      if (std::find(L.versions.begin(), L.versions.end(), v) != L.versions.end()) continue;
      L.versions.push_back(v);
    }
    if (!L.versions.empty()) s.lines.push_back(std::move(L));
  }
  return s;
}

void CrashSimulator::BuildImage(const State& s, const Choice& c, char* out) {
  std::memcpy(out, s.persisted.data(), s.persisted.size());
  for (size_t i = 0; i < s.lines.size(); i++) {
    const auto& L = s.lines[i];
    char* dst = out + L.index * kLine;
    if (!c.word_version.empty()) {
      for (int w = 0; w < 8; w++) {
        const uint8_t v = c.word_version[i][w];
        if (v > 0 && v <= L.versions.size())
          std::memcpy(dst + w * 8, L.versions[v - 1].data() + w * 8, 8);
      }
      continue;
    }
    const uint8_t v = i < c.line_version.size() ? c.line_version[i] : 0;
    if (v > 0 && v <= L.versions.size()) std::memcpy(dst, L.versions[v - 1].data(), kLine);
  }
}

std::string CrashSimulator::DescribeChoice(const State& s, const Choice& c) {
  std::string out;
  for (size_t i = 0; i < s.lines.size(); i++) {
    if (!c.word_version.empty()) {
      bool any = false;
      std::string w;
      for (int j = 0; j < 8; j++) {
        w += std::to_string(c.word_version[i][j]);
        any |= c.word_version[i][j] != 0;
      }
      if (any)
        out += (out.empty() ? "" : ", ") +
               ("line " + std::to_string(s.lines[i].index) + " words " + w);
      continue;
    }
    const uint8_t v = i < c.line_version.size() ? c.line_version[i] : 0;
    if (v == 0) continue;
    out += (out.empty() ? "" : ", ") +
           ("line " + std::to_string(s.lines[i].index) + " -> v" + std::to_string(v) + "/" +
            std::to_string(s.lines[i].versions.size()));
  }
  return out.empty() ? "all lines persisted" : out;
}

void ForEachCrashChoice(const CrashSimulator::State& s, uint64_t seed, int random, size_t max_pairs,
                        const std::function<bool(const CrashSimulator::Choice&)>& fn,
                        size_t max_singles) {
  const size_t n = s.lines.size();
  CrashSimulator::Choice c;
  c.line_version.assign(n, 0);
  if (!fn(c)) return;  // minimal
  if (n == 0 || s.eadr) return;
  for (size_t i = 0; i < n; i++)
    c.line_version[i] = static_cast<uint8_t>(s.lines[i].versions.size());
  if (!fn(c)) return;               // maximal
  // Each single line at each of its versions; past max_singles (a state after a large
  // non-temporal copy has hundreds of equivalent lines), an evenly spread deterministic subset.
  std::vector<std::pair<size_t, size_t>> singles;
  for (size_t i = 0; i < n; i++) {
    for (size_t v = 1; v <= s.lines[i].versions.size(); v++) singles.emplace_back(i, v);
  }
  std::mt19937_64 rng(seed);
  if (singles.size() > max_singles) {
    std::shuffle(singles.begin(), singles.end(), rng);
    singles.resize(max_singles);
    std::sort(singles.begin(), singles.end());
  }
  for (const auto& [i, v] : singles) {
    c.line_version.assign(n, 0);
    c.line_version[i] = static_cast<uint8_t>(v);
    if (!fn(c)) return;
  }
  size_t pairs = 0;
  for (size_t i = 0; i < n && pairs < max_pairs; i++) {  // pairs at newest versions
    for (size_t j = i + 1; j < n && pairs < max_pairs; j++, pairs++) {
      c.line_version.assign(n, 0);
      c.line_version[i] = static_cast<uint8_t>(s.lines[i].versions.size());
      c.line_version[j] = static_cast<uint8_t>(s.lines[j].versions.size());
      if (!fn(c)) return;
    }
  }
  for (int r = 0; r < random; r++) {
    c.line_version.assign(n, 0);
    c.word_version.clear();
    if (s.tear_words) {
      c.word_version.resize(n);
      for (size_t i = 0; i < n; i++) {
        for (auto& w : c.word_version[i])
          w = static_cast<uint8_t>(rng() % (s.lines[i].versions.size() + 1));
      }
    } else {
      for (size_t i = 0; i < n; i++) {
        c.line_version[i] = static_cast<uint8_t>(rng() % (s.lines[i].versions.size() + 1));
      }
    }
    if (!fn(c)) return;
  }
}

}  // namespace pmhash::pm
