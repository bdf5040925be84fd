// A structure-aware mutator for fuzz_chain (docs/fuzzing.md). Byte mutations
// of chain text almost always break the JSON or the schema, so few inputs get
// past parsing to validation and emission. Half the time, when the input is
// JSON, this mutates the document instead: one value replaced by a word of the
// schema, an interesting number or another value of the same document; an
// array element duplicated, dropped or moved; a key dropped, renamed or added.
// The result is written back as text. The other half, and for text that is not
// JSON, libFuzzer's own byte mutations run (syntax errors stay covered).
#include <iterator>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

namespace epifuse::fuzz {
namespace {

using Json = nlohmann::ordered_json;

// Keys and spellings of schema version 1 (docs/json-schema.md), and the names
// chains use. tests/fuzz/chain.dict holds the same for the byte mutations.
constexpr const char* k_words[] = {
    "epifuse", "name",   "mainloop", "inputs",    "ops",      "outputs",  "chain",   "out",      "precision",
    "shape",   "kind",   "a",        "b",         "a_layout", "b_layout", "math",    "exact",    "tf32",
    "elementwise", "gemm", "dual_gemm", "dtype",  "broadcast", "full",    "row",     "col",      "scalar",
    "f32",     "f16",    "bf16",     "accurate",  "fast",     "op",       "args",    "arg",      "value",
    "alpha",   "p",      "to",       "rng",       "philox4",  "triton",   "add",     "sub",      "mul",
    "max",     "min",    "scale",    "relu",      "gelu_tanh", "gelu_erf", "sigmoid", "silu",    "tanh",
    "dropout", "cast",   "acc",      "x"};

// Numbers at the edges of what the schema accepts: dimensions (0, 2^40, 2^48),
// probabilities, float32 overflow, vector widths and ragged sizes.
constexpr double k_numbers[] = {
    0, 1, -1, 2, 3, 7, 8, 16, 17, 255, 4096, 4097, 65536, 0.5, 1e-7, 0.999999, 1.0000001,
    3.4028235e38, 3.4028236e38, 1e39, 1099511627776.0, 1099511627777.0, 281474976710656.0, 2147483648.0};

class Mutation {
 public:
  Mutation(Json& doc, unsigned seed) : doc_(doc), rng_(seed) { collect(doc_); }

  void apply() {
    Json& target = *nodes_[pick(nodes_.size())];
    switch (pick(4)) {
      case 0: target = word(); break;
      case 1: target = number(); break;
      case 2: target = Json(*nodes_[pick(nodes_.size())]); break;  // a copy: the source may be inside target
      default: reshape(target); break;
    }
  }

 private:
  void collect(Json& j) {
    nodes_.push_back(&j);
    if (j.is_structured())
      for (auto& child : j) collect(child);
  }

  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }
  Json word() { return k_words[pick(std::size(k_words))]; }
  Json number() {
    const double v = k_numbers[pick(std::size(k_numbers))];
    // Integral values are written as JSON integers or floats (1099511627776.0).
    if (std::trunc(v) == v && std::abs(v) < 0x1p53 && pick(2)) return static_cast<std::int64_t>(v);
    return v;
  }
  Json some_value() { return pick(3) == 0 ? number() : pick(2) ? word() : Json(*nodes_[pick(nodes_.size())]); }

  void reshape(Json& target) {
    if (target.is_array() && !target.empty()) {
      const std::size_t i = pick(target.size());
      switch (pick(3)) {
        case 0: {
          const auto at = static_cast<std::ptrdiff_t>(pick(target.size() + 1));
          target.insert(target.begin() + at, Json(target[i]));
          break;
        }
        case 1: target.erase(target.begin() + static_cast<std::ptrdiff_t>(i)); break;
        default: std::swap(target[i], target[pick(target.size())]); break;
      }
    } else if (target.is_array()) {
      target.push_back(some_value());
    } else if (target.is_object() && !target.empty() && pick(2)) {
      auto it = target.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(pick(target.size())));
      Json moved = std::move(it.value());
      const std::string key = it.key();
      target.erase(key);
      // Dropped, or renamed (replacing any key of that name).
      if (pick(2)) target[k_words[pick(std::size(k_words))]] = std::move(moved);
    } else if (target.is_object()) {
      target[k_words[pick(std::size(k_words))]] = some_value();
    } else {
      target = Json::array({target});
    }
  }

  Json& doc_;
  std::mt19937 rng_;
  std::vector<Json*> nodes_;
};

}  // namespace
}  // namespace epifuse::fuzz

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned seed) {
  using epifuse::fuzz::Json;
  if (seed % 2 == 0) {
    Json doc = Json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_discarded() && doc.is_structured()) {
      epifuse::fuzz::Mutation(doc, seed).apply();
      const std::string text = doc.dump(seed % 4 == 0 ? 1 : -1);
      if (text.size() <= max_size) {
        std::memcpy(data, text.data(), text.size());
        return text.size();
      }
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}
