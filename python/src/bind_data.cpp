// ridge.data: the byte-level BPE tokenizer (ridge/text/tokenizer.hpp). Tokens cross as bytes (a token is
// any bytes, not text), ids as int32 arrays; python/ridge/data.py checks the Python types and turns str into
// bytes, the library checks the values and names the argument. The GIL is released around training, encoding
// and decoding.
#include <nanobind/stl/pair.h>

#include "common.hpp"
#include "ridge/text/tokenizer.hpp"

namespace ridge::py {
namespace {

using text::Tokenizer;

std::string to_string(const nb::bytes& b) {
  return std::string(b.c_str(), b.size());
}
nb::bytes to_bytes(const std::string& s) {
  return nb::bytes(s.data(), s.size());
}

// The library names its own arguments (train_bpe_files' `texts`, save_dir's `dir`); Python's are
// ridge.data's (`input_path`, `directory`). Runs `body` and raises its error again under the Python name.
template <typename F>
decltype(auto) named(std::initializer_list<std::pair<const char*, const char*>> names, F&& body) {
  try {
    return body();
  } catch (const Error& e) {
    for (const auto& [library, python] : names)
      if (e.argument() == library) throw e.renamed(python);
    throw;
  }
}

nb::list ids_to_list(const std::vector<int32_t>& ids) {
  nb::list out;
  for (int32_t id : ids) out.append(id);
  return out;
}

}  // namespace

void bind_data(nb::module_& m) {
  nb::class_<Tokenizer>(m, "Tokenizer")
      .def(
          "__init__",
          [](Tokenizer* self, const std::vector<nb::bytes>& vocab,
             const std::vector<std::pair<nb::bytes, nb::bytes>>& merges,
             const std::vector<std::string>& special_tokens) {
            std::vector<std::string> v;
            v.reserve(vocab.size());
            for (const auto& b : vocab) v.push_back(to_string(b));
            std::vector<std::pair<std::string, std::string>> mg;
            mg.reserve(merges.size());
            for (const auto& [a, b] : merges) mg.emplace_back(to_string(a), to_string(b));
            nb::gil_scoped_release release;
            new (self) Tokenizer(std::move(v), std::move(mg), special_tokens);
          },
          nb::arg("vocab"), nb::arg("merges"), nb::arg("special_tokens"))
      .def_static(
          "load",
          [](const std::string& vocab_path, const std::string& merges_path,
             const std::vector<std::string>& special_tokens) {
            nb::gil_scoped_release release;
            return Tokenizer::load(vocab_path, merges_path, special_tokens);
          },
          nb::arg("vocab_filepath"), nb::arg("merges_filepath"), nb::arg("special_tokens"))
      .def_static(
          "load_dir",
          [](const std::string& dir) {
            nb::gil_scoped_release release;
            return Tokenizer::load_dir(dir);
          },
          nb::arg("directory"))
      .def(
          "save_dir",
          [](const Tokenizer& t, const std::string& dir) {
            nb::gil_scoped_release release;
            named({{"dir", "directory"}}, [&] { t.save_dir(dir); });
          },
          nb::arg("directory"))
      .def("vocab_size", &Tokenizer::vocab_size)
      .def("content_hash", &Tokenizer::content_hash)
      .def("special_tokens", [](const Tokenizer& t) { return t.special_tokens(); })
      .def("vocab",
           [](const Tokenizer& t) {
             nb::list out;
             for (const auto& s : t.vocab()) out.append(to_bytes(s));
             return out;
           })
      .def("merges",
           [](const Tokenizer& t) {
             nb::list out;
             for (const auto& [a, b] : t.merges()) out.append(nb::make_tuple(to_bytes(a), to_bytes(b)));
             return out;
           })
      .def(
          "encode",
          [](const Tokenizer& t, const nb::bytes& text) {
            const std::string_view view(text.c_str(), text.size());
            std::vector<int32_t> ids;
            {
              nb::gil_scoped_release release;
              ids = t.encode(view);
            }
            return ids_to_list(ids);
          },
          nb::arg("text"))
      .def(
          "decode",
          [](const Tokenizer& t, const In& ids) {
            const auto span = int32_vector(ids, "ids");
            nb::gil_scoped_release release;
            return t.decode(span);
          },
          nb::arg("ids"))
      .def(
          "decode_bytes",
          [](const Tokenizer& t, const In& ids) {
            const auto span = int32_vector(ids, "ids");
            std::string out;
            {
              nb::gil_scoped_release release;
              out = t.decode_bytes(span);
            }
            return to_bytes(out);
          },
          nb::arg("ids"));

  // CS336's encode_iterable: pieces in, the ids that are final so far out, the rest held until finish().
  nb::class_<text::EncodeStream>(m, "EncodeStream")
      .def(nb::init<const Tokenizer&>(), nb::arg("tokenizer"), nb::keep_alive<1, 2>())
      .def(
          "feed",
          [](text::EncodeStream& s, const nb::bytes& text) {
            const std::string_view view(text.c_str(), text.size());
            std::vector<int32_t> ids;
            {
              nb::gil_scoped_release release;
              s.feed(view, ids);
            }
            return ids_to_list(ids);
          },
          nb::arg("text"))
      .def("finish", [](text::EncodeStream& s) {
        std::vector<int32_t> ids;
        {
          nb::gil_scoped_release release;
          s.finish(ids);
        }
        return ids_to_list(ids);
      });

  m.def(
      "train_bpe",
      [](const std::vector<std::string>& paths, int64_t vocab_size,
         const std::vector<std::string>& special_tokens) {
        nb::gil_scoped_release release;
        return named({{"texts", "input_path"}},
                     [&] { return text::train_bpe_files(paths, vocab_size, special_tokens); });
      },
      nb::arg("input_paths"), nb::arg("vocab_size"), nb::arg("special_tokens"));
}

}  // namespace ridge::py
