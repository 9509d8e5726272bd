// tests/crash/crash_harness.h — runs any index through the crash simulator.
//
// Three phases per configuration (PMDK style): create, mutate (crashing everywhere), check.
//
//   1. Create the pool under a CrashSimulator (Sim policy): every fence of the creation is a
//      crash point; a crash there must reopen as an empty index (the incomplete pool is
//      re-created) — never as garbage.
//   2. Run a seeded workload (insert/upsert/update/erase on a small key range, small geometry
//      so splits and directory doublings happen). Every fence with pending flushes and every
//      operation boundary is a crash point. For the states captured during one operation the
//      oracle has two acceptable answers: the model before the operation and after it (the
//      in-flight operation is either fully applied or absent).
//   3. For each crash point, materialise images (minimal, maximal, single lines, pairs, random)
//      into a file, reopen it with a fresh index object (no DRAM state survives), and check:
//      contents == model_before or model_after, CheckInvariants() (which also proves that
//      allocated chunks == reachable chunks: no leak), Size() == scan, and that the recovered
//      index keeps working (more inserts/erases, invariants again). Every Nth image is also
//      recovered under a second simulator, and every crash point of that recovery is recovered
//      again (crash during recovery).
//
// Determinism: everything derives from Config::seed. A failure names seed, operation, crash
// point and the (shrunk) set of line versions, and prints a command that replays exactly that
// crash point (PMHASH_CRASH_SEED / PMHASH_CRASH_POINT).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "pm/crash_sim.h"
#include "pm/persist.h"
#include "pmhash/index.h"

namespace pmhash::crashtest {

struct Config {
  uint64_t seed = 1;
  int ops = 400;
  uint64_t key_range = 2000;
  int random_images = 3;
  size_t max_pairs = 12;
  double budget_seconds = 20;
  uint64_t max_images = 1000000;
  int recovery_crash_every = 25;  // nested recovery-crash check on every Nth image
  bool eadr = false;
  bool tear_words = false;
  int64_t only_point = -1;  // replay: check this crash point only

  // PMHASH_CRASH_SEED, PMHASH_CRASH_POINT, PMHASH_CRASH_BUDGET (seconds), PMHASH_TEST_SCALE.
  Config WithEnv() const {
    Config c = *this;
    if (const char* s = std::getenv("PMHASH_CRASH_SEED")) c.seed = std::strtoull(s, nullptr, 10);
    if (const char* s = std::getenv("PMHASH_CRASH_POINT"))
      c.only_point = std::strtoll(s, nullptr, 10);
    if (const char* s = std::getenv("PMHASH_CRASH_BUDGET"))
      c.budget_seconds = std::strtod(s, nullptr);
    if (const char* s = std::getenv("PMHASH_TEST_SCALE")) {
      const double f = std::strtod(s, nullptr);
      if (f > 0) {
        c.ops = static_cast<int>(c.ops * f);
        c.budget_seconds *= f;
      }
    }
    return c;
  }
};

struct Report {
  uint64_t crash_points = 0;
  uint64_t states_checked = 0;
  uint64_t images_checked = 0;
  uint64_t recovery_images_checked = 0;
  bool budget_exhausted = false;
  std::string failure;  // empty: passed
};

using Model = std::map<Key, Value>;

inline std::string TempPoolPath(const std::string& tag) {
  const char* dir = std::getenv("TMPDIR");
  std::string base = (access("/dev/shm", W_OK) == 0) ? "/dev/shm" : (dir ? dir : "/tmp");
  return base + "/pmhash-crash-" + tag + "-" + std::to_string(getpid()) + ".pool";
}

// IndexT is a template over a persist policy (e.g. reh::Reh).
template <template <class> class IndexT>
class Harness {
 public:
  using SimIndex = IndexT<pm::Sim>;
  using CheckIndex = IndexT<pm::Dram>;  // recovery of an image needs no flushing

  // `base_options` gives geometry, hash mode and pool size; path/durability/mode are set here.
  Harness(Config config, Options base_options, std::string test_name)
      : cfg_(config.WithEnv()),
        base_(WithSeed(std::move(base_options), cfg_.seed)),
        name_(std::move(test_name)) {}

  Report Run() {
    const std::string tag = name_ + "-" + std::to_string(cfg_.seed);
    path_ = TempPoolPath(tag);
    image_path_ = TempPoolPath(tag + "-img");
    unlink(path_.c_str());
    start_ = std::chrono::steady_clock::now();

    pm::CrashSimulator sim(pm::CrashSimConfig{cfg_.eadr, cfg_.tear_words});
    sim_ = &sim;
    sim.set_crash_point_callback([&](uint64_t point) {
      if (cfg_.only_point >= 0 && static_cast<int64_t>(point) != cfg_.only_point) return;
      if (Exhausted()) return;
      captured_.push_back(sim.Capture());
    });
    pm::SimHook* prev = pm::SetThreadSimHook(&sim);

    // Phase 1: creation.
    Options o = base_;
    o.path = path_;
    o.durability = Durability::kSim;
    o.mode = OpenMode::kCreateExclusive;
    auto opened = SimIndex::Open(o);
    if (!opened.ok()) {
      pm::SetThreadSimHook(prev);
      report_.failure = "create failed: " + opened.status().ToString();
      return Finish();
    }
    std::unique_ptr<SimIndex> index = std::move(opened).value();
    op_desc_ = "create";
    VerifyCaptured(Model{}, Model{}, /*creation=*/true);

    // Phase 2: workload.
    std::mt19937_64 rng(cfg_.seed);
    Model model;
    for (int i = 0; i < cfg_.ops && report_.failure.empty(); i++) {
      const Key k = rng() % cfg_.key_range;
      const Value v = rng();
      const int r = static_cast<int>(rng() % 100);
      Model before = model;
      Status s;
      std::ostringstream d;
      d << "op " << i << ": ";
      if (r < 50) {
        d << "Insert(" << k << ")";
        s = index->Insert(k, v);
        if (s.ok()) model[k] = v;
      } else if (r < 65) {
        d << "Upsert(" << k << ")";
        s = index->Upsert(k, v);
        if (s.ok()) model[k] = v;
      } else if (r < 75) {
        d << "Update(" << k << ")";
        s = index->Update(k, v);
        if (s.ok()) model[k] = v;
      } else {
        d << "Erase(" << k << ")";
        s = index->Erase(k);
        if (s.ok()) model.erase(k);
      }
      op_desc_ = d.str();
      if (!s.ok() && !s.IsExists() && !s.IsNotFound()) {
        report_.failure = op_desc_ + " returned " + s.ToString();
        break;
      }
      sim.CrashPoint();  // operation boundary
      VerifyCaptured(before, model, false);
    }
    if (report_.failure.empty()) {
      op_desc_ = "close";
      (void)index->Close();
      index.reset();
      VerifyCaptured(model, model, false);
    }
    index.reset();
    pm::SetThreadSimHook(prev);
    report_.crash_points = sim.crash_points();
    return Finish();
  }

 private:
  // The hash seed derives from the run seed too: one number replays everything.
  static Options WithSeed(Options o, uint64_t seed) {
    o.hash_seed = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    return o;
  }

  bool Exhausted() {
    if (report_.images_checked >= cfg_.max_images) report_.budget_exhausted = true;
    if (Elapsed() > cfg_.budget_seconds) report_.budget_exhausted = true;
    return report_.budget_exhausted;
  }
  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  Report Finish() {
    unlink(path_.c_str());
    unlink(image_path_.c_str());
    return report_;
  }

  Status WriteImage(const std::vector<char>& img, const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return Status::IOError("open image file " + path);
    size_t done = 0;
    while (done < img.size()) {
      const ssize_t w = pwrite(fd, img.data() + done, img.size() - done, static_cast<off_t>(done));
      if (w <= 0) {
        close(fd);
        return Status::IOError("write image file");
      }
      done += static_cast<size_t>(w);
    }
    close(fd);
    return Status::OK();
  }

  // Recovers the pool at `path` with a fresh index object and checks it against the oracle.
  // Returns "" if fine, else what is wrong.
  std::string CheckRecovered(const std::string& path, const Model& before, const Model& after,
                             bool creation, bool keep_working) {
    Options o = base_;
    o.path = path;
    o.durability = Durability::kDram;
    o.mode = creation ? OpenMode::kOpenOrCreate : OpenMode::kOpenExisting;
    auto r = CheckIndex::Open(o);
    if (!r.ok()) return "recovery failed: " + r.status().ToString();
    auto& idx = *r.value();
    Model got;
    bool dup = false;
    idx.ForEach([&](Key k, Value v) { dup |= !got.emplace(k, v).second; });
    if (dup) return "duplicate key after recovery";
    if (got != before && got != after) {
      std::ostringstream m;
      m << "recovered contents match neither side of the in-flight op (got " << got.size()
        << " keys, before " << before.size() << ", after " << after.size() << ")";
      for (const auto& [k, v] : got) {
        auto a = after.find(k);
        auto b = before.find(k);
        if ((a == after.end() || a->second != v) && (b == before.end() || b->second != v)) {
          m << "; phantom/wrong key " << k;
          break;
        }
      }
      for (const auto& [k, v] : before) {
        if (!got.count(k) && after.count(k)) {
          m << "; lost key " << k;
          break;
        }
      }
      return m.str();
    }
    if (idx.Size() != got.size()) return "Size() != scan";
    if (Status s = idx.CheckInvariants(); !s.ok()) return s.ToString();
    if (keep_working) {
      // The recovered index must keep working.
      for (uint64_t j = 0; j < 40; j++) {
        const Key k = cfg_.key_range + 1000 + j * 7919;
        if (Status s = idx.Insert(k, j); !s.ok()) return "post-recovery insert: " + s.ToString();
      }
      for (uint64_t j = 0; j < 40; j += 3) {
        if (Status s = idx.Erase(cfg_.key_range + 1000 + j * 7919); !s.ok()) {
          return "post-recovery erase: " + s.ToString();
        }
      }
      if (Status s = idx.CheckInvariants(); !s.ok()) return "after more ops: " + s.ToString();
    }
    return "";
  }

  // Crash during recovery: recover `image_path_` under a second simulator and check every image
  // of every crash point of that recovery.
  std::string CheckRecoveryCrashes(const Model& before, const Model& after, bool creation) {
    pm::CrashSimulator rsim(pm::CrashSimConfig{cfg_.eadr, cfg_.tear_words});
    std::vector<pm::CrashSimulator::State> states;
    rsim.set_crash_point_callback([&](uint64_t) { states.push_back(rsim.Capture()); });
    pm::SimHook* prev = pm::SetThreadSimHook(&rsim);
    {
      Options o = base_;
      o.path = image_path_;
      o.durability = Durability::kSim;
      o.mode = creation ? OpenMode::kOpenOrCreate : OpenMode::kOpenExisting;
      auto r = SimIndex::Open(o);
      if (r.ok()) rsim.CrashPoint();  // recovery done, before any new operation
    }
    pm::SetThreadSimHook(prev);
    const std::string nested = TempPoolPath(name_ + "-rec");
    std::string err;
    for (const auto& st : states) {
      pm::ForEachCrashChoice(
          st, cfg_.seed ^ st.point, 1, 4, [&](const pm::CrashSimulator::Choice& c) {
            std::vector<char> img(st.persisted.size());
            pm::CrashSimulator::BuildImage(st, c, img.data());
            if (Status s = WriteImage(img, nested); !s.ok()) {
              err = s.ToString();
              return false;
            }
            report_.recovery_images_checked++;
            err = CheckRecovered(nested, before, after, creation, false);
            if (!err.empty())
              err = "crash during recovery (recovery point " + std::to_string(st.point) + ", " +
                    pm::CrashSimulator::DescribeChoice(st, c) + "): " + err;
            return err.empty();
          });
      if (!err.empty()) break;
    }
    unlink(nested.c_str());
    return err;
  }

  void VerifyCaptured(const Model& before, const Model& after, bool creation) {
    // Verification opens pools: keep the workload's simulator out of it.
    pm::SimHook* prev = pm::SetThreadSimHook(nullptr);
    std::vector<pm::CrashSimulator::State> states = std::move(captured_);
    captured_.clear();
    for (const auto& st : states) {
      if (!report_.failure.empty()) break;
      report_.states_checked++;
      std::vector<char> img(st.persisted.size());
      pm::ForEachCrashChoice(
          st, cfg_.seed ^ (st.point * 0x9E3779B97F4A7C15ULL), cfg_.random_images, cfg_.max_pairs,
          [&](const pm::CrashSimulator::Choice& c) {
            pm::CrashSimulator::BuildImage(st, c, img.data());
            if (Status s = WriteImage(img, image_path_); !s.ok()) {
              report_.failure = s.ToString();
              return false;
            }
            report_.images_checked++;
            std::string err = CheckRecovered(image_path_, before, after, creation, true);
            if (err.empty() && cfg_.recovery_crash_every > 0 &&
                report_.images_checked % cfg_.recovery_crash_every == 0) {
              if (Status s = WriteImage(img, image_path_); s.ok()) {
                err = CheckRecoveryCrashes(before, after, creation);
              }
            }
            if (!err.empty()) {
              const auto shrunk = Shrink(st, c, before, after, creation);
              std::ostringstream m;
              m << "crash image fails: " << err << "\n  seed " << cfg_.seed << ", " << op_desc_
                << ", crash point " << st.point << " (" << st.lines.size()
                << " lines differ from the persisted image)\n  line versions: "
                << pm::CrashSimulator::DescribeChoice(st, shrunk)
                << "\n  replay: PMHASH_CRASH_SEED=" << cfg_.seed
                << " PMHASH_CRASH_POINT=" << st.point << " <this test binary> --gtest_filter='*"
                << name_ << "*'";
              report_.failure = m.str();
              return false;
            }
            return report_.images_checked < cfg_.max_images;
          });
    }
    pm::SetThreadSimHook(prev);
  }

  // Drops line versions from a failing choice while it keeps failing.
  pm::CrashSimulator::Choice Shrink(const pm::CrashSimulator::State& st,
                                    pm::CrashSimulator::Choice c, const Model& before,
                                    const Model& after, bool creation) {
    std::vector<char> img(st.persisted.size());
    auto fails = [&](const pm::CrashSimulator::Choice& x) {
      pm::CrashSimulator::BuildImage(st, x, img.data());
      if (!WriteImage(img, image_path_).ok()) return false;
      return !CheckRecovered(image_path_, before, after, creation, true).empty();
    };
    for (size_t i = 0; i < st.lines.size(); i++) {
      pm::CrashSimulator::Choice t = c;
      if (!t.word_version.empty()) {
        t.word_version[i].fill(0);
      } else if (i < t.line_version.size() && t.line_version[i] != 0) {
        t.line_version[i] = 0;
      } else {
        continue;
      }
      if (fails(t)) c = t;
    }
    return c;
  }

  const Config cfg_;
  const Options base_;
  const std::string name_;
  std::string path_, image_path_;
  std::chrono::steady_clock::time_point start_;
  pm::CrashSimulator* sim_ = nullptr;
  std::vector<pm::CrashSimulator::State> captured_;
  std::string op_desc_;
  Report report_;
};

}  // namespace pmhash::crashtest
