// libFuzzer target over the JSON front end, validation and emission
// (docs/fuzzing.md). Each input is chain text. Rejecting it with a UserError
// is the expected answer to bad input; everything else that escapes (an
// InternalError from EPIFUSE_ASSERT, std::out_of_range, a broken property
// checked below) aborts, and libFuzzer saves the input as a crash. Sanitizers
// (address, undefined) turn memory errors and UB into crashes too.
//
// What one input goes through, none of it needing a GPU or NVRTC:
//   spec_from_json_text (syntax, limits, schema, graph builder, verify)
//   print, signature, signature_bytes
//   emit_kernel at the chain's shape: the family's default tile, fastest path
//   emit_kernel at one of tile_candidates (chosen by a hash of the input), general path
//   spec_to_json -> text -> spec_from_json_text: the same signature, the same
//   document when written again, and the same kernel source
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include <nlohmann/json.hpp>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "epifuse/codegen.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"
#include "epifuse/spec.hpp"

namespace epifuse::fuzz {
namespace {

// A broken property of an accepted chain: a bug in epifuse, reported as a crash.
[[noreturn]] void fail(std::string_view what) {
  std::fprintf(stderr, "fuzz_chain: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

std::optional<KernelSpec> parse(std::string_view text) {
  try {
    return spec_from_json_text(text, "<fuzz>");
  } catch (const UserError&) {
    return std::nullopt;  // bad input, rejected as it should be
  }
}

// The shape a chain is emitted for: its own, else the one `epifuse emit` uses.
// Emission allocates nothing in proportion to the shape (the source depends
// on it only through its class and the default tile), so the chain's shape,
// already bounded by verify_shape (2^40 per dimension, 2^48 elements), is used
// as written.
Shape shape_of(const KernelSpec& spec) {
  if (spec.default_shape) return *spec.default_shape;
  return {1024, 1024, spec.mainloop.kind == MainloopKind::elementwise ? 0 : 1024};
}

// A UserError here is a chain the code generator does not support (a dual
// GEMM, mixed operand dtypes): expected, like a parse error.
std::optional<KernelSource> emit(const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& tile,
                                 KernelPath path) {
  try {
    return emit_kernel(spec, shape, tile, path);
  } catch (const UserError&) {
    return std::nullopt;
  }
}

// One tile the tuner would try, picked by the input's hash so that a corpus
// covers them all while each input stays deterministic.
std::optional<TileConfig> candidate_tile(const KernelSpec& spec, const Shape& shape, std::string_view text) {
  const std::vector<TileConfig> tiles = tile_candidates(spec, shape);
  if (tiles.empty()) return std::nullopt;
  return tiles[XXH3_64bits(text.data(), text.size()) % tiles.size()];
}

// Written, read back and written again: the documented round trip of
// spec_to_json (same signature) and a fixed point after one pass. A UserError
// from reading back what epifuse wrote is a bug, not bad input.
KernelSpec check_round_trip(const KernelSpec& spec) {
  const nlohmann::ordered_json written = spec_to_json(spec);
  KernelSpec again = spec_from_json_text(written.dump(), "<spec_to_json>");
  if (signature(again) != signature(spec)) fail("spec_to_json then parsing changed the signature");
  if (signature_bytes(again) != signature_bytes(spec)) fail("spec_to_json then parsing changed signature_bytes");
  if (again.default_shape != spec.default_shape) fail("spec_to_json then parsing changed the shape");
  if (spec_to_json(again) != written) fail("spec_to_json is not a fixed point after one round trip");
  return again;
}

void check_chain(std::string_view text) {
  const std::optional<KernelSpec> spec = parse(text);
  if (!spec) return;
  (void)print(*spec);
  const KernelSpec again = check_round_trip(*spec);

  const Shape shape = shape_of(*spec);
  const std::optional<KernelSource> source = emit(*spec, shape, std::nullopt, KernelPath::fastest);
  if (source) {
    // Generated text names no user text: the round-tripped spec (renamed
    // values) gives the same bytes (STYLE rule 6, DESIGN §6).
    // Past this point a UserError is a bug too: it escapes and aborts.
    if (emit_kernel(again, shape).text != source->text) fail("the round-tripped spec emits different source");
    // The tuner tries every candidate: each must be a tile the family accepts.
    if (const auto tile = candidate_tile(*spec, shape, text))
      (void)emit_kernel(*spec, shape, tile, KernelPath::general);
  }
}

}  // namespace
}  // namespace epifuse::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    epifuse::fuzz::check_chain(text);
  } catch (const std::exception& e) {
    // Not a UserError: an InternalError (EPIFUSE_ASSERT) or a library
    // exception that escaped the checks. Name it, then crash.
    std::fprintf(stderr, "fuzz_chain: uncaught %s: %s\n", typeid(e).name(), e.what());
    std::abort();
  }
  return 0;
}
