// Prompt caching from Python: ringkv.PromptCache (lib/ringkv/prompt_cache.h),
// and the caches files of ringkv::SaveCaches / LoadCaches (lib/ringkv/cache_file.h)
// behind ringkv.save_prompt_cache / load_prompt_cache (python/ringkv/prompt_cache.py).
//
// A PromptCache is not thread-safe (one drives one LayerCaches). Its slow calls
// (lookup, commit, save, load) run without the GIL, so a second Python thread
// could reach the same object meanwhile: every call marks the object busy, and
// a call that finds it busy (another thread, or the forward that prefill calls
// back) raises ringkv.Error instead of racing.

#include "ringkv/prompt_cache.h"

#include <fmt/format.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "layer_caches.h"
#include "register.h"
#include "ringkv/cache_file.h"
#include "ringkv/error.h"

namespace ringkv::python {

namespace {

// Token ids from any 1-D sequence or array of integers, each within C++ int.
// Anything else throws ringkv::Error naming `function` and the problem.
std::vector<int> Tokens(const char* function, py::handle tokens) {
  const py::array array = py::module_::import("numpy").attr("asarray")(tokens);
  if (array.ndim() != 1) {
    throw Error(fmt::format("[{}] tokens has {} dimensions, not 1", function, array.ndim()));
  }
  std::vector<int> ids(static_cast<std::size_t>(array.size()));
  if (ids.empty()) return ids;  // np.asarray([]) is float64: no ids, nothing to check
  const char kind = array.dtype().kind();
  if (kind != 'i' && kind != 'u') {
    throw Error(fmt::format("[{}] tokens dtype {} is not an integer type", function,
                            py::str(array.dtype()).cast<std::string>()));
  }
  auto check = [&](auto values) {
    auto at = values.template unchecked<1>();
    for (py::ssize_t i = 0; i < at.shape(0); ++i) {
      const auto id = at(i);
      if (std::cmp_greater(id, INT_MAX) || std::cmp_less(id, INT_MIN)) {
        throw Error(fmt::format("[{}] tokens[{}] {} is outside the int range [{}, {}]", function, i,
                                id, INT_MIN, INT_MAX));
      }
      ids[static_cast<std::size_t>(i)] = static_cast<int>(id);
    }
  };
  if (kind == 'u') {
    check(py::array_t<std::uint64_t, py::array::forcecast>::ensure(array));
  } else {
    check(py::array_t<std::int64_t, py::array::forcecast>::ensure(array));
  }
  return ids;
}

py::list TokenList(const std::vector<int>& ids) {
  py::list list(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) list[i] = py::int_(ids[i]);
  return list;
}

// A str or bytes as bytes. A str's lone surrogates are kept as their (invalid)
// UTF-8 bytes, so the library's own UTF-8 check names the argument.
std::string Utf8(const char* function, const char* argument, py::handle text) {
  if (py::isinstance<py::bytes>(text)) return text.cast<std::string>();
  if (!py::isinstance<py::str>(text)) {
    throw py::type_error(fmt::format("[{}] {} is a {}, not a str", function, argument,
                                     Py_TYPE(text.ptr())->tp_name));
  }
  const py::object bytes = py::reinterpret_steal<py::object>(
      PyUnicode_AsEncodedString(text.ptr(), "utf-8", "surrogatepass"));
  if (!bytes) throw py::error_already_set();
  return bytes.cast<std::string>();
}

// A path: str, bytes or os.PathLike (what os.fspath accepts).
std::string Path(py::handle path) {
  return py::module_::import("os").attr("fspath")(path).cast<std::string>();
}

// The bytes of a bytes-like object, held (and so unchanged) while this lives.
class Bytes {
 public:
  explicit Bytes(py::handle object) {
    if (PyObject_GetBuffer(object.ptr(), &view_, PyBUF_SIMPLE) != 0) throw py::error_already_set();
  }
  ~Bytes() { PyBuffer_Release(&view_); }
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  std::span<const std::byte> Span() const {
    return {static_cast<const std::byte*>(view_.buf), static_cast<std::size_t>(view_.len)};
  }

 private:
  Py_buffer view_{};
};

class PyPromptCache {
 public:
  PyPromptCache(py::object caches, std::size_t byte_budget, py::handle fingerprint)
      : caches_object_(std::move(caches)),
        caches_(caches_object_.cast<const PyLayerCaches&>().caches),
        cache_(*caches_,
               PromptCacheOptions{.byte_budget = byte_budget,
                                  .fingerprint = Utf8("PromptCache", "fingerprint", fingerprint)}) {
  }

  // Runs `call` on the prompt cache with the GIL released (or held, for calls
  // back into Python), refusing overlapping calls. Call with the GIL held.
  template <class Call>
  auto Run(const char* function, bool release_gil, Call&& call) {
    if (busy_) {
      throw Error(fmt::format(
          "[{}] another call on this PromptCache is running (it is not thread-safe, and "
          "prefill's forward must not call it)",
          function));
    }
    busy_ = true;
    struct Done {
      bool& busy;
      ~Done() { busy = false; }
    } done{busy_};
    if (!release_gil) return call(cache_);
    py::gil_scoped_release release;
    return call(cache_);
  }

  const py::object& Caches() const noexcept { return caches_object_; }

 private:
  py::object caches_object_;             // the ringkv.LayerCaches, returned by .caches
  std::shared_ptr<LayerCaches> caches_;  // what cache_ refers to, alive while it is
  PromptCache cache_;
  bool busy_ = false;  // read and written with the GIL held
};

void RegisterTypes(py::module_& m) {
  py::class_<PrefixMatch>(m, "PrefixMatch",
                          "What PromptCache.lookup found: the caches hold tokens[0, reused); "
                          "prefill should stop at each of checkpoints (prefill() does).")
      .def(py::init([](int reused, std::vector<int> checkpoints) {
             return PrefixMatch{reused, std::move(checkpoints)};
           }),
           py::arg("reused") = 0, py::arg("checkpoints") = std::vector<int>{})
      .def_readonly("reused", &PrefixMatch::reused)
      .def_readonly("checkpoints", &PrefixMatch::checkpoints)
      .def("__repr__", [](const PrefixMatch& p) {
        return fmt::format("PrefixMatch(reused={}, checkpoints=[{}])", p.reused,
                           fmt::join(p.checkpoints, ", "));
      });

  py::class_<PromptCacheStats>(m, "PromptCacheStats")
      .def_readonly("lookups", &PromptCacheStats::lookups)
      .def_readonly("hits", &PromptCacheStats::hits)
      .def_readonly("tokens_reused", &PromptCacheStats::tokens_reused)
      .def_readonly("evictions", &PromptCacheStats::evictions)
      .def_readonly("merges", &PromptCacheStats::merges)
      .def_readonly("splits", &PromptCacheStats::splits)
      .def_readonly("bytes", &PromptCacheStats::bytes)
      .def_readonly("nodes", &PromptCacheStats::nodes)
      .def("__repr__", [](const PromptCacheStats& s) {
        return fmt::format(
            "PromptCacheStats(lookups={}, hits={}, tokens_reused={}, evictions={}, merges={}, "
            "splits={}, bytes={}, nodes={})",
            s.lookups, s.hits, s.tokens_reused, s.evictions, s.merges, s.splits, s.bytes, s.nodes);
      });

  py::class_<PromptNodeInfo>(m, "PromptNode", "A read-only picture of one trie node.")
      .def_readonly("parent", &PromptNodeInfo::parent)
      .def_readonly("start", &PromptNodeInfo::start)
      .def_readonly("end", &PromptNodeInfo::end)
      .def_readonly("tokens", &PromptNodeInfo::tokens)
      .def_readonly("bytes", &PromptNodeInfo::bytes)
      .def_readonly("last_used", &PromptNodeInfo::last_used)
      .def_readonly("pinned", &PromptNodeInfo::pinned)
      .def_readonly("active", &PromptNodeInfo::active)
      .def_readonly("missing_windows", &PromptNodeInfo::missing_windows)
      .def("__repr__", [](const PromptNodeInfo& n) {
        return fmt::format("PromptNode(parent={}, start={}, end={}, pinned={}, active={})",
                           n.parent, n.start, n.end, n.pinned, n.active);
      });
}

void RegisterPromptCacheClass(py::module_& m) {
  using P = PyPromptCache;
  py::class_<P>(m, "PromptCache",
                "Skips re-prefilling token prefixes already seen: a token trie of snapshots of "
                "`caches` (a LayerCaches, kept alive by this object) under a byte budget. "
                "docs/prompt_cache.md has the rules; the loop is\n\n"
                "    match = pc.lookup(prompt)            # caches hold prompt[:match.reused]\n"
                "    pc.prefill(prompt, match, forward)   # forward(chunk) updates the caches\n"
                "    ... decode ...\n"
                "    pc.commit(tokens_in_the_caches)\n\n"
                "Not thread-safe: overlapping calls raise ringkv.Error.")
      .def(py::init([](py::object caches, std::size_t byte_budget, py::handle fingerprint) {
             if (!py::isinstance<PyLayerCaches>(caches)) {
               throw py::type_error(fmt::format("[PromptCache] caches is a {}, not a LayerCaches",
                                                Py_TYPE(caches.ptr())->tp_name));
             }
             return std::make_unique<P>(std::move(caches), byte_budget, fingerprint);
           }),
           py::arg("caches"), py::arg("byte_budget") = PromptCacheOptions{}.byte_budget,
           py::arg("fingerprint") = "")
      .def_property_readonly("caches", &P::Caches)
      .def_property_readonly("byte_budget",
                             [](P& self) {
                               return self.Run(
                                   "PromptCache.byte_budget", false,
                                   [](PromptCache& c) { return c.Options().byte_budget; });
                             })
      .def_property_readonly("fingerprint",
                             [](P& self) {
                               return self.Run(
                                   "PromptCache.fingerprint", false,
                                   [](PromptCache& c) { return c.Options().fingerprint; });
                             })
      .def(
          "lookup",
          [](P& self, py::handle tokens) {
            const std::vector<int> ids = Tokens("PromptCache.lookup", tokens);
            return self.Run("PromptCache.lookup", true,
                            [&](PromptCache& c) { return c.Lookup(ids); });
          },
          py::arg("tokens"),
          "Brings the caches to the longest cached prefix of tokens that every layer can "
          "reach, holding back at least one token; returns a PrefixMatch.")
      .def(
          "prefill",
          [](P& self, py::handle tokens, const PrefixMatch& match, const py::function& forward) {
            const std::vector<int> ids = Tokens("PromptCache.prefill", tokens);
            // The GIL stays held: every chunk goes back into Python.
            self.Run("PromptCache.prefill", false, [&](PromptCache& c) {
              c.Prefill(ids, match, [&](std::span<const int> chunk) {
                py::array_t<int> array(static_cast<py::ssize_t>(chunk.size()));
                std::copy(chunk.begin(), chunk.end(), array.mutable_data());
                forward(array);
              });
            });
          },
          py::arg("tokens"), py::arg("match"), py::arg("forward"),
          "Calls forward(chunk) (an int32 array) over tokens[match.reused:], in chunks that end "
          "at match.checkpoints, with checkpoint() at each. An exception in forward propagates.")
      .def(
          "checkpoint",
          [](P& self) {
            self.Run("PromptCache.checkpoint", true, [](PromptCache& c) { c.Checkpoint(); });
          },
          "Captures the sliding-window layers at the caches' current offset.")
      .def(
          "commit",
          [](P& self, py::handle tokens) {
            const std::vector<int> ids = Tokens("PromptCache.commit", tokens);
            self.Run("PromptCache.commit", true, [&](PromptCache& c) { c.Commit(ids); });
          },
          py::arg("tokens"),
          "The caches now hold exactly tokens (extending what lookup restored): the trie grows "
          "to cover them.")
      .def(
          "pin",
          [](P& self, py::handle tokens) {
            const std::vector<int> ids = Tokens("PromptCache.pin", tokens);
            self.Run("PromptCache.pin", false, [&](PromptCache& c) { c.Pin(ids); });
          },
          py::arg("tokens"))
      .def(
          "unpin",
          [](P& self, py::handle tokens) {
            const std::vector<int> ids = Tokens("PromptCache.unpin", tokens);
            self.Run("PromptCache.unpin", false, [&](PromptCache& c) { c.Unpin(ids); });
          },
          py::arg("tokens"))
      .def("clear",
           [](P& self) { self.Run("PromptCache.clear", false, [](PromptCache& c) { c.Clear(); }); })
      .def(
          "save",
          [](P& self, py::handle path, py::handle tokens) {
            const std::string file = Path(path);
            if (tokens.is_none()) {
              self.Run("PromptCache.save", true, [&](PromptCache& c) { c.Save(file); });
              return;
            }
            const std::vector<int> ids = Tokens("PromptCache.save", tokens);
            self.Run("PromptCache.save", true, [&](PromptCache& c) { c.SaveEntry(file, ids); });
          },
          py::arg("path"), py::arg("tokens") = py::none(),
          "Writes the whole trie, or with tokens only their cached path, atomically.")
      .def(
          "load",
          [](P& self, py::handle path) {
            const std::string file = Path(path);
            self.Run("PromptCache.load", true, [&](PromptCache& c) { c.Load(file); });
          },
          py::arg("path"),
          "Replaces the trie with a file's contents after validating all of it; on any problem "
          "raises ringkv.SnapshotError naming it, with nothing changed.")
      .def(
          "load_from_memory",
          [](P& self, py::handle data) {
            const Bytes bytes(data);
            self.Run("PromptCache.load_from_memory", true,
                     [&](PromptCache& c) { c.LoadFromMemory(bytes.Span()); });
          },
          py::arg("data"), "load() from a bytes-like object.")
      .def_property_readonly("stats",
                             [](P& self) {
                               return self.Run("PromptCache.stats", false,
                                               [](PromptCache& c) { return c.Stats(); });
                             })
      .def("nodes",
           [](P& self) {
             return self.Run("PromptCache.nodes", false, [](PromptCache& c) { return c.Nodes(); });
           })
      .def("snapshot_bytes", [](P& self) {
        return self.Run("PromptCache.snapshot_bytes", false,
                        [](PromptCache& c) { return c.SnapshotBytes(); });
      });
}

void RegisterCacheFiles(py::module_& m) {
  m.def(
      "_save_caches",
      [](const std::string& path, const PyLayerCaches& caches, py::handle tokens,
         const std::map<std::string, std::string>& metadata) {
        const std::vector<int> ids = Tokens("save_prompt_cache", tokens);
        py::gil_scoped_release release;
        SaveCaches(path, *caches.caches, ids, metadata);
      },
      py::arg("path"), py::arg("caches"), py::arg("tokens"), py::arg("metadata"),
      "ringkv::SaveCaches (save_prompt_cache in ringkv/prompt_cache.py validates the "
      "arguments' Python types); metadata strings as UTF-8 bytes.");
  m.def(
      "_load_caches",
      [](const std::string& path) {
        SavedCaches saved = [&] {
          py::gil_scoped_release release;
          return LoadCaches(path);
        }();
        py::object caches =
            py::cast(PyLayerCaches{std::make_shared<LayerCaches>(std::move(saved.caches))});
        return py::make_tuple(caches, TokenList(saved.tokens), py::cast(saved.metadata));
      },
      py::arg("path"), "ringkv::LoadCaches: (LayerCaches, tokens list, metadata dict).");
}

}  // namespace

void RegisterPromptCache(py::module_& m) {
  RegisterTypes(m);
  RegisterPromptCacheClass(m);
  RegisterCacheFiles(m);
}

}  // namespace ringkv::python
