// Byte-level BPE (see include/ridge/model/tokenizer.hpp). Stub while the implementation lands: every
// entry point throws ridge::Error, so the API can be built against.
#include "ridge/model/tokenizer.hpp"

#include "ridge/core/error.hpp"

namespace ridge::model {

namespace {
[[noreturn]] void todo(const char* what) { throw Error(std::string(what) + ": not implemented yet"); }
}  // namespace

struct Tokenizer::Impl {};

std::string gpt2_byte_to_unicode(uint8_t) { todo("gpt2_byte_to_unicode"); }
Tokenizer::Tokenizer(std::vector<std::string>, std::vector<std::pair<std::string, std::string>>,
                     std::vector<std::string>) {
  todo("Tokenizer");
}
Tokenizer Tokenizer::load(const std::string&, const std::string&, std::vector<std::string>) { todo("load"); }
Tokenizer Tokenizer::load_dir(const std::string&) { todo("load_dir"); }
void Tokenizer::save_dir(const std::string&) const { todo("save_dir"); }
int32_t Tokenizer::special_id(std::string_view) const { todo("special_id"); }
uint64_t Tokenizer::content_hash() const { todo("content_hash"); }
std::vector<int32_t> Tokenizer::encode(std::string_view, int) const { todo("encode"); }
std::vector<int32_t> Tokenizer::encode_pretoken(std::string_view) const { todo("encode_pretoken"); }
std::vector<std::string_view> Tokenizer::pretokenize(std::string_view) const { todo("pretokenize"); }
std::string Tokenizer::decode_bytes(std::span<const int32_t>) const { todo("decode_bytes"); }
std::string Tokenizer::decode(std::span<const int32_t>) const { todo("decode"); }
Tokenizer::Tokenizer(const Tokenizer&) { todo("Tokenizer copy"); }
Tokenizer& Tokenizer::operator=(const Tokenizer&) { todo("Tokenizer copy"); }
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() { delete impl_; }

EncodeStream::EncodeStream(const Tokenizer& tokenizer, int threads) : tok_(tokenizer), threads_(threads) {}
void EncodeStream::feed(std::string_view, std::vector<int32_t>&) { todo("EncodeStream::feed"); }
void EncodeStream::finish(std::vector<int32_t>&) { todo("EncodeStream::finish"); }

EncodeFileStats encode_file(const Tokenizer&, const std::vector<std::string>&, const std::string&, int) {
  todo("encode_file");
}
Tokenizer train_bpe(std::string_view, int64_t, const std::vector<std::string>&, int, BpeTrainStats*) {
  todo("train_bpe");
}
Tokenizer train_bpe_files(const std::vector<std::string>&, int64_t, const std::vector<std::string>&, int,
                          BpeTrainStats*) {
  todo("train_bpe_files");
}

}  // namespace ridge::model
