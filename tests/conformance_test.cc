// tests/conformance_test.cc — the conformance suite (conformance_suite.h) run over the
// OracleIndex, which proves the tests themselves, and the registry tests (not per type). The
// kinds run the suite in conformance_<policy>.cc.
#include <algorithm>
#include <string_view>

#include "conformance_suite.h"

namespace pmhash::testing {
namespace {
// The oracle runs the same suite (the kinds: conformance_<policy>.cc).
INSTANTIATE_TYPED_TEST_SUITE_P(Oracle, ConformanceTest, ::testing::Types<OracleIndex>);

// ============================================================================================
// Registry (not per type)
// ============================================================================================

TEST(Registry, RehIsRegisteredAndOpensForEveryDurability) {
  bool found = false;
  for (const IndexInfo& info : RegisteredIndexes()) {
    EXPECT_FALSE(info.name.empty());
    EXPECT_FALSE(info.description.empty());
    found |= info.name == "reh";
  }
  EXPECT_TRUE(found);
  for (Durability d : {Durability::kDram, Durability::kAdr, Durability::kEadr, Durability::kSim}) {
    SCOPED_TRACE(std::string(DurabilityName(d)));
    ScopedPath path("registry");
    Options o;
    o.path = path.path();
    o.pool_size = 8 << 20;
    o.durability = d;
    auto r = pmhash::Open("reh", o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)->kind(), "reh");
    EXPECT_EQ((*r)->durability(), d);
    for (Key k = 0; k < 500; k++) ASSERT_TRUE((*r)->Insert(k, k).ok());
    EXPECT_EQ((*r)->Size(), 500u);
    EXPECT_TRUE((*r)->CheckInvariants().ok());
    EXPECT_TRUE((*r)->Close().ok());
  }
  // Anonymous (path-less) pools work through the facade too.
  Options anon;
  anon.pool_size = 8 << 20;
  anon.durability = Durability::kDram;
  auto r = pmhash::Open("reh", anon);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE((*r)->Insert(1, 2).ok());
  Value v;
  ASSERT_TRUE((*r)->Find(1, &v).ok());
  EXPECT_EQ(v, 2u);
}

// A pool describes itself: every kind reopens with nothing but its path (kind, durability and
// every pool property from the header), and a property the caller does give is checked against
// the pool's, one by one (src/index/descriptor.h).
TEST(Registry, EveryKindIsSelfDescribing) {
  size_t kinds = 0;
  index::IndexKinds::ForEach([&]<class D>() {
    kinds++;
    SCOPED_TRACE(std::string(D::kName));
    ScopedPath path("self_describing");
    {
      Options o;
      o.path = path.path();
      o.pool_size = 64 << 20;
      o.durability = Durability::kEadr;
      auto r = pmhash::Open(D::kName, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      for (Key k = 1; k <= 100; k++) ASSERT_TRUE((*r)->Insert(k, k + 1).ok());
      ASSERT_TRUE((*r)->Close().ok());
    }
    Options bare;
    bare.path = path.path();
    bare.mode = OpenMode::kOpenExisting;
    typename D::Stored stored{};
    {
      auto r = pmhash::Open(bare);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ((*r)->kind(), D::kName);
      EXPECT_EQ((*r)->durability(), Durability::kEadr);
      EXPECT_EQ((*r)->Size(), 100u);
      // The registry's capabilities (from the descriptor, no pool opened) are the instance's.
      auto caps = pmhash::KindCapabilities(D::kName);
      ASSERT_TRUE(caps.ok()) << caps.status().ToString();
      EXPECT_EQ(caps.value(), (*r)->capabilities());
      EXPECT_EQ((*r)->bytes() != nullptr, (*r)->capabilities().bytes);
      EXPECT_EQ((*r)->multi() != nullptr, (*r)->capabilities().multi);
      Value v = 0;
      ASSERT_TRUE((*r)->Find(42, &v).ok());
      EXPECT_EQ(v, 43u);
    }
    {
      // The stored block, through the concrete engine (pool properties are public there).
      auto e = index::EngineOf<D, pm::Eadr>::Open(bare);
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      auto decoded = index::DecodeParams<D>((*e)->pool().params());
      ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
      stored = decoded.value();
    }
    std::apply(
        [&](const auto&... prop) {
          auto one = [&](const auto& p) {
            SCOPED_TRACE(std::string(p.name));
            using V = typename std::remove_reference_t<decltype(p)>::Value;
            Options o = bare;
            typename D::Params& given = const_cast<typename D::Params&>(D::Given(o));
            given.*p.given = static_cast<V>(stored.*p.stored);  // the pool's own value
            auto same = pmhash::Open(D::kName, o);
            EXPECT_TRUE(same.ok()) << same.status().ToString();
            same = Status::NotFound("closed");
            given.*p.given = static_cast<V>(stored.*p.stored + 1);  // another one
            auto other = pmhash::Open(D::kName, o);
            ASSERT_FALSE(other.ok());
            EXPECT_TRUE(other.status().IsInvalidArgument()) << other.status().ToString();
            // Named as a property ("pea.max_depth = 33 was asked for ...") or, if the value is
            // impossible in itself, by the validation ("initial_buckets ... powers of two").
            const std::string_view field = p.name.substr(p.name.find('.') + 1);
            EXPECT_NE(other.status().message().find(field), std::string_view::npos)
                << other.status().ToString();
          };
          (one(prop), ...);
        },
        index::PropertiesOf<D>());
    // Whatever it holds: a pool of another kind is refused by name.
    auto wrong = pmhash::Open(D::kName == "reh" ? "pea" : "reh", bare);
    ASSERT_FALSE(wrong.ok());
    EXPECT_TRUE(wrong.status().IsInvalidArgument()) << wrong.status().ToString();
  });
  EXPECT_EQ(kinds, RegisteredIndexes().size());
  // Nothing to describe itself: no file, or an anonymous pool.
  ScopedPath missing("self_describing_missing");
  Options o;
  o.path = missing.path();
  auto r = pmhash::Open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsNotFound()) << r.status().ToString();
  EXPECT_FALSE(FileExists(missing.path()));
  o.path.clear();
  r = pmhash::Open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
}

// Every registered kind is in exactly one family of typed suites (engine_types.h): the
// unique-key kinds in AllEngines (this conformance suite, stress_test.cc), the multimaps
// (Capabilities::multi) in MultiEngines (multi_test.cc). A kind missing from both, or a multimap
// run by the unique-key suites (whose Insert expects kExists), fails here.
TEST(Registry, EveryKindIsInATypedSuite) {
  const std::vector<std::string_view> unique = KindNamesOf<AllEngines<pm::Dram>>::Get();
  const std::vector<std::string_view> multi = KindNamesOf<MultiEngines<pm::Dram>>::Get();
  auto count = [](const std::vector<std::string_view>& v, std::string_view n) {
    return std::count(v.begin(), v.end(), n);
  };
  for (const IndexInfo& info : RegisteredIndexes()) {
    SCOPED_TRACE(std::string(info.name));
    auto caps = KindCapabilities(info.name);
    ASSERT_TRUE(caps.ok()) << caps.status().ToString();
    EXPECT_EQ(count(unique, info.name), caps.value().multi ? 0 : 1)
        << "the unique-key suites (AllEngines) must run every kind but the multimaps";
    EXPECT_EQ(count(multi, info.name), caps.value().multi ? 1 : 0)
        << "the multi suites (MultiEngines, multi_test.cc) must run every multimap kind";
  }
  EXPECT_EQ(unique.size() + multi.size(), RegisteredIndexes().size());
  EXPECT_FALSE(unique.empty());
}

TEST(Registry, UnknownKindAndDurability) {
  ScopedPath path("registry_bad");
  Options o;
  o.path = path.path();
  o.pool_size = 8 << 20;
  for (std::string_view kind : {"", "REH", "reh ", "Pea", "pea ", "no-such-index"}) {
    auto r = pmhash::Open(kind, o);
    ASSERT_FALSE(r.ok()) << kind;
    EXPECT_TRUE(r.status().IsInvalidArgument()) << kind << ": " << r.status().ToString();
  }
  o.durability = static_cast<Durability>(42);
  auto r = pmhash::Open("reh", o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  EXPECT_FALSE(FileExists(path.path()));
}

}  // namespace
}  // namespace pmhash::testing
