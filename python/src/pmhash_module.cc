// python/src/pmhash_module.cc — the Python binding of pmhash: module pmhash._pmhash (pybind11).
//
// One class, Pool: a dict-like object over a pmhash::Index. Its key space follows the pool's
// capabilities:
//   bytes kinds (every -kv kind)   keys and values are bytes (bytes-like objects and str, as
//                                  UTF-8, are accepted); an int key or value is stored as its
//                                  8 little-endian bytes (the library's own rule); values are
//                                  returned as bytes.
//   uint64 kinds                   keys and values are ints in [0, 2**64).
//   multi-value kinds (pea-multi)  int keys with several int values: pool[k] is the sorted list of
//                                  k's values, add(k, v) adds one, remove(k, v) removes one,
//                                  del pool[k] removes all; len() counts pairs.
// Status codes become exceptions: kNotFound -> KeyError, kInvalidArgument -> ValueError,
// kIOError -> OSError, kOutOfMemory -> MemoryError, and the pmhash.Error subclasses
// ExistsError (also a KeyError), CorruptionError, OutOfSpaceError, BusyError (also an OSError),
// NotSupportedError (also a NotImplementedError).
//
// Threads: every index call runs with the GIL released, so Python threads use the index in
// parallel; close() waits for the calls in flight (a reader-writer lock), and every call after
// it raises ValueError, as on a closed file.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "pmhash/pmhash.h"

namespace py = pybind11;

namespace {

using pmhash::Status;
using pmhash::WriteKind;
using pmhash::WriteOp;

// pmhash's own exception classes: attributes of this module, created at import.
py::object ErrorClass(const char* name) { return py::module_::import("pmhash._pmhash").attr(name); }

[[noreturn]] void Raise(const Status& s, py::handle key = py::handle()) {
  const std::string msg = s.ToString();
  auto set = [&](const char* cls) { PyErr_SetString(ErrorClass(cls).ptr(), msg.c_str()); };
  switch (s.code()) {
    case Status::Code::kNotFound:
      // As a dict: the KeyError's argument is the key itself.
      PyErr_SetObject(PyExc_KeyError, key ? key.ptr() : py::str(msg).ptr());
      throw py::error_already_set();
    case Status::Code::kInvalidArgument: throw py::value_error(msg);
    case Status::Code::kIOError: PyErr_SetString(PyExc_OSError, msg.c_str()); break;
    case Status::Code::kOutOfMemory: PyErr_SetString(PyExc_MemoryError, msg.c_str()); break;
    case Status::Code::kExists:
      PyErr_SetObject(ErrorClass("ExistsError").ptr(), key ? key.ptr() : py::str(msg).ptr());
      break;
    case Status::Code::kCorruption: set("CorruptionError"); break;
    case Status::Code::kOutOfSpace: set("OutOfSpaceError"); break;
    case Status::Code::kBusy: set("BusyError"); break;
    case Status::Code::kNotSupported: set("NotSupportedError"); break;
    default: set("Error"); break;
  }
  throw py::error_already_set();
}

std::string Le8(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

class Pool {
 public:
  explicit Pool(std::unique_ptr<pmhash::Index> index)
      : index_(std::move(index)),
        bytes_(index_->bytes()),
        multi_(bytes_ ? nullptr : index_->multi()),
        kind_(index_->kind()),
        durability_(pmhash::DurabilityName(index_->durability())) {}
  // An open pool is closed cleanly by the Index's destructor when the Pool is collected.

  const std::string& kind() const { return kind_; }
  const std::string& durability() const { return durability_; }
  std::string key_space() const { return bytes_ ? "bytes" : multi_ ? "multi" : "uint64"; }
  bool closed() const { return closed_.load(); }

  // ---- key and value conversion (with the GIL) ----
  // A key or value of a bytes kind: bytes-like, str (UTF-8) or int (8 little-endian bytes).
  std::string ToBytes(py::handle o, const char* what) const {
    if (py::isinstance<py::bytes>(o)) return o.cast<std::string>();
    if (py::isinstance<py::str>(o)) return o.cast<std::string>();
    if (py::isinstance<py::int_>(o) && !py::isinstance<py::bool_>(o)) return Le8(ToU64(o, what));
    if (PyObject_CheckBuffer(o.ptr())) {
      py::buffer_info b = py::reinterpret_borrow<py::buffer>(o).request();
      return std::string(static_cast<const char*>(b.ptr),
                         static_cast<size_t>(b.size * b.itemsize));
    }
    throw py::type_error(std::string(what) + " must be bytes, str or int, not " +
                         std::string(py::str(py::type::of(o).attr("__name__"))));
  }
  uint64_t ToU64(py::handle o, const char* what) const {
    if (!py::isinstance<py::int_>(o) || py::isinstance<py::bool_>(o)) {
      throw py::type_error(std::string(what) + " must be an int on pool kind '" + kind() +
                           "' (uint64 keys and values; kinds with bytes keys: " +
                           pmhash::KindsWith(&pmhash::Capabilities::bytes) + "), not " +
                           std::string(py::str(py::type::of(o).attr("__name__"))));
    }
    const unsigned long long v = PyLong_AsUnsignedLongLong(o.ptr());
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      throw py::value_error(std::string(what) + " must be in [0, 2**64)");
    }
    return v;
  }

  // ---- the dict protocol ----
  py::object Get(py::handle key, py::object dflt) const {
    py::object r;
    const Status s = FindObj(key, &r);
    if (s.IsNotFound()) return dflt;
    if (!s.ok()) Raise(s, key);
    return r;
  }
  py::object GetItem(py::handle key) const {
    py::object r;
    const Status s = FindObj(key, &r);
    if (!s.ok()) Raise(s, key);
    return r;
  }
  void SetItem(py::handle key, py::handle value) {
    if (multi_) {
      Raise(Status::NotSupported("pool[k] = v on a multi-value pool: use add(k, v)"));
    }
    Write(key, value, Op::kUpsert);
  }
  void Insert(py::handle key, py::handle value) { Write(key, value, Op::kInsert); }
  void Replace(py::handle key, py::handle value) { Write(key, value, Op::kUpdate); }

  // dict.update: upserts the pairs of a mapping or an iterable of pairs, then keyword pairs
  // (str keys, as UTF-8), converted first and written with the GIL released once. On an error
  // the pairs before it are written (as with dict.update); int pairs go in WriteBatches of 64
  // (their persists share fences on reh), so some of the failing pair's batch may be too.
  void UpdateMany(py::object other, py::kwargs kwargs) {
    if (multi_) {
      Raise(Status::NotSupported("update() on a multi-value pool: use add(k, v)"));
    }
    std::vector<std::pair<std::string, std::string>> bp;
    std::vector<std::pair<uint64_t, uint64_t>> np;
    auto add = [&](py::handle k, py::handle v) {
      if (bytes_) {
        bp.emplace_back(ToBytes(k, "key"), ToBytes(v, "value"));
      } else {
        np.emplace_back(ToU64(k, "key"), ToU64(v, "value"));
      }
    };
    if (!other.is_none()) {
      if (py::hasattr(other, "keys")) {
        for (py::handle k : other.attr("keys")()) add(k, other[k]);
      } else {
        for (py::handle item : other) {
          py::sequence pair = py::reinterpret_borrow<py::sequence>(item);
          if (pair.size() != 2) throw py::value_error("update() needs (key, value) pairs");
          add(pair[0], pair[1]);
        }
      }
    }
    for (auto [k, v] : kwargs) add(k, v);
    const Status s = Call([&] {
      for (const auto& [k, v] : bp) PMHASH_RETURN_IF_ERROR(bytes_->Upsert(k, v));
      constexpr size_t kBatch = 64;
      std::vector<WriteOp> ops;
      std::vector<Status> statuses(kBatch);
      for (size_t first = 0; first < np.size(); first += kBatch) {
        ops.clear();
        for (size_t i = first; i < std::min(np.size(), first + kBatch); i++) {
          ops.push_back({WriteKind::kUpsert, np[i].first, np[i].second});
        }
        PMHASH_RETURN_IF_ERROR(index_->WriteBatch(ops, statuses));
        for (size_t i = 0; i < ops.size(); i++) PMHASH_RETURN_IF_ERROR(statuses[i]);
      }
      return Status::OK();
    });
    if (!s.ok()) Raise(s);
  }

  // dict.pop: the value of `key`, which is erased; `default` (or KeyError) if absent. Two index
  // calls: another thread's write of the key in between is either returned or erased unseen.
  py::object Pop(py::handle key, py::object dflt) {
    if (multi_) Raise(Status::NotSupported("pop() on a multi-value pool"));
    py::object value;
    Status s = FindObj(key, &value);
    if (s.ok()) {
      if (bytes_) {
        const std::string k = ToBytes(key, "key");
        s = Call([&] { return bytes_->Erase(k); });
      } else {
        const uint64_t k = ToU64(key, "key");
        s = Call([&] { return index_->Erase(k); });
      }
    }
    if (s.IsNotFound() && dflt.ptr() != MissingSentinel().ptr()) return dflt;
    if (!s.ok()) Raise(s, key);
    return value;
  }
  // pop()'s "no default given".
  static py::object MissingSentinel() {
    return py::module_::import("pmhash._pmhash").attr("_MISSING");
  }
  void DelItem(py::handle key) {
    Status s;
    if (bytes_) {
      const std::string k = ToBytes(key, "key");
      s = Call([&] { return bytes_->Erase(k); });
    } else {
      const uint64_t k = ToU64(key, "key");
      s = Call([&] { return multi_ ? multi_->EraseAll(k) : index_->Erase(k); });
    }
    if (!s.ok()) Raise(s, key);
  }
  bool Contains(py::handle key) const {
    if (!bytes_ && (!py::isinstance<py::int_>(key) || py::isinstance<py::bool_>(key))) {
      return false;  // not a possible key: like a dict, `in` does not raise
    }
    py::object r;
    const Status s = FindObj(key, &r);
    if (s.IsNotFound()) return false;
    if (!s.ok()) Raise(s, key);
    return true;
  }
  uint64_t Len() const {
    return CallValue([&] { return index_->Size(); });
  }

  // Values of many keys in one call (the GIL released once): `default` for absent keys.
  py::list GetMany(py::iterable keys, py::object dflt) const {
    if (multi_) Raise(Status::NotSupported("get_many on a multi-value pool"));
    std::vector<std::string> bkeys;
    std::vector<uint64_t> nkeys;
    for (py::handle k : keys) {
      if (bytes_) {
        bkeys.push_back(ToBytes(k, "key"));
      } else {
        nkeys.push_back(ToU64(k, "key"));
      }
    }
    const size_t n = bytes_ ? bkeys.size() : nkeys.size();
    std::vector<std::string> bvals(bytes_ ? n : 0);
    std::vector<uint64_t> nvals(bytes_ ? 0 : n);
    std::vector<Status> st(n);
    {
      Guard g(this);
      py::gil_scoped_release nogil;
      if (bytes_) {
        for (size_t i = 0; i < n; i++) st[i] = bytes_->Find(bkeys[i], &bvals[i]);
      } else if (Status s = index_->FindBatch(nkeys, nvals, st); !s.ok()) {
        st.assign(n, s);  // (the spans match: only a closed index refuses)
      }
    }
    py::list out(n);
    for (size_t i = 0; i < n; i++) {
      if (st[i].IsNotFound()) {
        out[i] = dflt;
      } else if (!st[i].ok()) {
        Raise(st[i]);
      } else if (bytes_) {
        out[i] = py::bytes(bvals[i]);
      } else {
        out[i] = py::int_(nvals[i]);
      }
    }
    return out;
  }

  // Every (key, value) pair: a list, built after one walk of the index.
  py::list Items() const {
    std::vector<std::pair<std::string, std::string>> bp;
    std::vector<std::pair<uint64_t, uint64_t>> np;
    const Status s = Call([&] {
      if (bytes_) {
        return bytes_->ForEach([&](std::string_view k, std::string_view v) {
          bp.emplace_back(std::string(k), std::string(v));
        });
      }
      auto fn = [&](pmhash::Key k, pmhash::Value v) { np.emplace_back(k, v); };
      return multi_ ? multi_->ForEach(fn) : index_->ForEach(fn);
    });
    if (!s.ok()) Raise(s);
    py::list out;
    for (const auto& [k, v] : bp) out.append(py::make_tuple(py::bytes(k), py::bytes(v)));
    for (const auto& [k, v] : np) out.append(py::make_tuple(py::int_(k), py::int_(v)));
    return out;
  }
  py::list Keys() const {
    py::list out;
    py::object seen = multi_ ? py::object(py::set()) : py::object();
    for (py::handle item : Items()) {
      py::object k = item.cast<py::tuple>()[0];
      if (multi_) {
        if (seen.contains(k)) continue;
        seen.attr("add")(k);
      }
      out.append(k);
    }
    return out;
  }
  py::list Values() const {
    py::list out;
    for (py::handle item : Items()) out.append(item.cast<py::tuple>()[1]);
    return out;
  }

  // ---- multi-value pools ----
  void Add(py::handle key, py::handle value) {
    NeedMulti("add");
    const uint64_t k = ToU64(key, "key"), v = ToU64(value, "value");
    const Status s = Call([&] { return multi_->Insert(k, v); });
    if (!s.ok()) Raise(s, key);
  }
  void Remove(py::handle key, py::handle value) {
    NeedMulti("remove");
    const uint64_t k = ToU64(key, "key"), v = ToU64(value, "value");
    const Status s = Call([&] { return multi_->Erase(k, v); });
    if (!s.ok()) Raise(s, py::make_tuple(key, value));
  }
  uint64_t Count(py::handle key) const {
    NeedMulti("count");
    const uint64_t k = ToU64(key, "key");
    return CallValue([&] { return multi_->Count(k); });
  }

  // ---- the rest ----
  py::dict Stats() const {
    const pmhash::IndexStats st = CallValue([&] { return index_->Stats(); });
    py::dict d;
    d["kind"] = kind();
    d["durability"] = durability();
    d["size"] = st.size;
    d["capacity_slots"] = st.capacity_slots;
    d["load_factor"] = st.load_factor;
    d["pm_bytes"] = st.pm_bytes;
    d["dram_bytes"] = st.dram_bytes;
    d["pool_bytes"] = st.pool_bytes;
    d["buckets"] = st.buckets;
    d["global_depth"] = st.global_depth;
    d["splits"] = st.splits;
    d["doublings"] = st.doublings;
    d["recovered"] = st.recovered;
    d["recovery_seconds"] = st.recovery_seconds;
    d["state_loaded"] = st.state_loaded;
    d["mapping"] = st.mapping;
    py::dict traffic;
    traffic["persists"] = st.traffic.persists;
    traffic["fences"] = st.traffic.fences;
    traffic["flushed_lines"] = st.traffic.flushed_lines;
    traffic["nt_bytes"] = st.traffic.nt_bytes;
    traffic["media_writes"] = st.traffic.media_writes;
    traffic["cached_dirty_lines"] = st.traffic.cached_dirty_lines;
    d["traffic"] = traffic;
    py::dict details;
    for (const pmhash::NamedStat& n : st.details) details[py::str(n.name)] = n.value;
    d["details"] = details;
    return d;
  }
  void Check() const {
    const Status s = Call([&] { return index_->CheckInvariants(); });
    if (!s.ok()) Raise(s);
  }
  void Close() {
    if (closed_.load()) return;
    Status s;
    {
      py::gil_scoped_release nogil;
      std::unique_lock<std::shared_mutex> lock(mu_);  // waits for the calls in flight
      if (closed_.exchange(true)) return;  // another thread closed it meanwhile
      s = index_->Close();
      index_.reset();  // releases the pool's lock: it can be opened again at once
    }
    if (!s.ok()) Raise(s);
  }

 private:
  enum class Op { kInsert, kUpdate, kUpsert };

  // Holds the pool open for one call (shared); raises ValueError on a closed pool.
  class Guard {
   public:
    explicit Guard(const Pool* p) : lock_(p->mu_) {
      if (p->closed_.load()) throw py::value_error("operation on a closed pmhash pool");
    }

   private:
    std::shared_lock<std::shared_mutex> lock_;
  };

  template <class F>
  Status Call(F&& f) const {
    Guard g(this);
    py::gil_scoped_release nogil;
    return f();
  }
  template <class F>
  auto CallValue(F&& f) const -> decltype(f()) {
    Guard g(this);
    py::gil_scoped_release nogil;
    return f();
  }

  void NeedMulti(const char* what) const {
    if (!multi_) {
      Raise(Status::NotSupported(std::string(what) + "() needs a multi-value pool (kinds: " +
                                 pmhash::KindsWith(&pmhash::Capabilities::multi) + "); '" +
                                 kind() + "' has one value per key"));
    }
  }

  Status FindObj(py::handle key, py::object* out) const {
    if (bytes_) {
      const std::string k = ToBytes(key, "key");
      std::string v;
      const Status s = Call([&] { return bytes_->Find(k, &v); });
      if (s.ok()) *out = py::bytes(v);
      return s;
    }
    const uint64_t k = ToU64(key, "key");
    if (multi_) {
      std::vector<pmhash::Value> vs;
      const Status s = Call([&] { return multi_->FindAll(k, &vs); });
      if (s.ok()) {
        std::sort(vs.begin(), vs.end());
        *out = py::cast(vs);
      }
      return s;
    }
    pmhash::Value v = 0;
    const Status s = Call([&] { return index_->Find(k, &v); });
    if (s.ok()) *out = py::int_(v);
    return s;
  }

  void Write(py::handle key, py::handle value, Op op) {
    if (multi_) {
      Raise(Status::NotSupported("insert/update on a multi-value pool: use add(k, v)"));
    }
    Status s;
    if (bytes_) {
      const std::string k = ToBytes(key, "key"), v = ToBytes(value, "value");
      s = Call([&] {
        return op == Op::kInsert   ? bytes_->Insert(k, v)
               : op == Op::kUpdate ? bytes_->Update(k, v)
                                   : bytes_->Upsert(k, v);
      });
    } else {
      const uint64_t k = ToU64(key, "key"), v = ToU64(value, "value");
      s = Call([&] {
        return op == Op::kInsert   ? index_->Insert(k, v)
               : op == Op::kUpdate ? index_->Update(k, v)
                                   : index_->Upsert(k, v);
      });
    }
    if (!s.ok()) Raise(s, key);
  }

  std::unique_ptr<pmhash::Index> index_;  // null once closed
  pmhash::BytesApi* bytes_;
  pmhash::MultiApi* multi_;
  const std::string kind_;
  const std::string durability_;
  mutable std::shared_mutex mu_;
  std::atomic<bool> closed_{false};  // set under mu_ held exclusively
};

std::unique_ptr<Pool> OpenPool(const std::string& path, std::optional<std::string> kind,
                               std::optional<std::string> durability,
                               std::optional<uint64_t> pool_size, std::optional<bool> create,
                               bool counters, std::optional<uint32_t> background_threads,
                               bool huge_pages) {
  pmhash::Options o;
  o.path = path;
  o.counters = counters;
  o.huge_pages = huge_pages;
  if (pool_size) o.pool_size = *pool_size;
  if (background_threads) o.background_threads = *background_threads;
  if (durability) {
    pmhash::Durability d;
    if (*durability == "sim" || !pmhash::ParseDurability(*durability, &d)) {
      throw py::value_error("durability must be 'adr', 'eadr' or 'dram', not '" + *durability +
                            "'");
    }
    o.durability = d;
  }
  const bool may_create = create.value_or(kind.has_value());
  if (may_create && !kind) {
    throw py::value_error("create=True needs a kind (pmhash.kinds() lists them)");
  }
  o.mode = may_create ? pmhash::OpenMode::kOpenOrCreate : pmhash::OpenMode::kOpenExisting;
  auto r = [&] {
    py::gil_scoped_release nogil;  // recovery may take a while
    return kind ? pmhash::Open(*kind, o) : pmhash::Open(o);
  }();
  if (!r.ok()) {
    if (r.status().IsNotFound()) {
      PyErr_SetString(PyExc_FileNotFoundError, r.status().ToString().c_str());
      throw py::error_already_set();
    }
    Raise(r.status());
  }
  return std::make_unique<Pool>(std::move(r).value());
}

}  // namespace

PYBIND11_MODULE(_pmhash, m) {
  m.doc() = "pmhash: persistent-memory hash indexes (the C++ core; use the pmhash package)";
  auto make = [&](const char* name, py::handle bases, const char* doc) {
    PyObject* t = PyErr_NewExceptionWithDoc(("pmhash." + std::string(name)).c_str(), doc,
                                            bases.ptr(), nullptr);
    if (t == nullptr) throw py::error_already_set();
    py::object o = py::reinterpret_steal<py::object>(t);
    m.attr(name) = o;
    return o;
  };
  const py::object base = make("Error", PyExc_Exception, "Base class of pmhash's own errors.");
  make("ExistsError", py::make_tuple(base, py::handle(PyExc_KeyError)),
       "insert() of a key that is present.");
  make("CorruptionError", base,
       "The pool's contents fail validation (bad header, checksum, offsets...).");
  make("OutOfSpaceError", base, "The pool (or a structural limit) is full.");
  make("BusyError", py::make_tuple(base, py::handle(PyExc_OSError)),
       "The pool is open in another process or handle.");
  make("NotSupportedError", py::make_tuple(base, py::handle(PyExc_NotImplementedError)),
       "The operation is not offered by this pool's kind.");

  const py::object missing = py::module_::import("builtins").attr("object")();
  m.attr("_MISSING") = missing;  // pop()'s "no default given"

  py::class_<Pool>(m, "Pool", "A dict-like pmhash index in a pool file (see pmhash.open).")
      .def_property_readonly("kind", &Pool::kind)
      .def_property_readonly("durability", &Pool::durability)
      .def_property_readonly("key_space", &Pool::key_space)
      .def_property_readonly("closed", &Pool::closed)
      .def("get", &Pool::Get, py::arg("key"), py::arg("default") = py::none())
      .def("__getitem__", &Pool::GetItem)
      .def("__setitem__", &Pool::SetItem)
      .def("__delitem__", &Pool::DelItem)
      .def("__contains__", &Pool::Contains)
      .def("__len__", &Pool::Len)
      .def("__iter__", [](const Pool& p) { return py::iter(p.Keys()); })
      .def("insert", &Pool::Insert, py::arg("key"), py::arg("value"))
      .def("replace", &Pool::Replace, py::arg("key"), py::arg("value"))
      .def("update", &Pool::UpdateMany, py::arg("other") = py::none())
      .def("pop", &Pool::Pop, py::arg("key"), py::arg("default") = missing)
      .def("get_many", &Pool::GetMany, py::arg("keys"), py::arg("default") = py::none())
      .def("items", &Pool::Items)
      .def("keys", &Pool::Keys)
      .def("values", &Pool::Values)
      .def("add", &Pool::Add, py::arg("key"), py::arg("value"))
      .def("remove", &Pool::Remove, py::arg("key"), py::arg("value"))
      .def("count", &Pool::Count, py::arg("key"))
      .def("stats", &Pool::Stats)
      .def("check", &Pool::Check)
      .def("close", &Pool::Close)
      .def("__enter__", [](Pool& p) -> Pool& { return p; }, py::return_value_policy::reference)
      .def("__exit__", [](Pool& p, py::handle, py::handle, py::handle) { p.Close(); })
      .def("__repr__", [](const Pool& p) {
        return "<pmhash.Pool kind='" + p.kind() + "' durability='" + p.durability() + "'" +
               (p.closed() ? " closed>" : ">");
      });

  m.def("open", &OpenPool, py::arg("path"), py::arg("kind") = py::none(), py::kw_only(),
        py::arg("durability") = py::none(), py::arg("pool_size") = py::none(),
        py::arg("create") = py::none(), py::arg("counters") = false,
        py::arg("background_threads") = py::none(), py::arg("huge_pages") = false);
  m.def("kinds", [] {
    py::list out;
    for (const pmhash::IndexInfo& i : pmhash::RegisteredIndexes()) {
      const pmhash::Capabilities c = pmhash::KindCapabilities(i.name).value();
      py::dict d;
      d["name"] = std::string(i.name);
      d["paper"] = std::string(i.paper);
      d["description"] = std::string(i.description);
      d["bytes"] = c.bytes;
      d["multi"] = c.multi;
      out.append(d);
    }
    return out;
  });
}
