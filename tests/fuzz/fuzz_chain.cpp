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
//   spec_to_json -> text -> spec_from_json_text: the same signature and shape,
//     and the same document when written again
// and, for a chain the code generator supports, at the chain's shape:
//   emit_kernel with the family's default tile: the same source for the
//     round-tripped spec; the launch geometry and workspace
//   emit_kernel with one of tile_candidates, general path: must be accepted
//   emit_kernel with an arbitrary tile (as `--tile` may give): accepted or a UserError
// and, for a chain grad() differentiates (a UserError where nothing is):
//   the forward with its saved tensors and the backward: they print and
//     round-trip, and the round-tripped chain's grad has the same signatures
//   each emitted with its family's default tile where the generator supports
//     it (what the torch ops compile), with its launch geometry and workspace
//   for a single GEMM, the backward as the GEMM's dgrad epilogue (as_gemm_epilogue,
//     the upstream gradient of the first output): a UserError, or emitted likewise
// The tiles are picked by a hash of the input, so each input is deterministic
// and a run covers them all.
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

#include "codegen/family.hpp"
#include "codegen/row/row.hpp"
#include "epifuse/autodiff.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/dgrad.hpp"
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

// Written, read back and written again: the documented round trip of
// spec_to_json (same signature) and a fixed point after one pass. A UserError
// from reading back what epifuse wrote is a bug, not bad input: it escapes.
KernelSpec check_round_trip(const KernelSpec& spec) {
  const nlohmann::ordered_json written = spec_to_json(spec);
  KernelSpec again = spec_from_json_text(written.dump(), "<spec_to_json>");
  if (signature(again) != signature(spec)) fail("spec_to_json then parsing changed the signature");
  if (signature_bytes(again) != signature_bytes(spec)) fail("spec_to_json then parsing changed signature_bytes");
  if (again.default_shape != spec.default_shape) fail("spec_to_json then parsing changed the shape");
  if (spec_to_json(again) != written) fail("spec_to_json is not a fixed point after one round trip");
  return again;
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

// Draws from a hash of the input (splitmix64): deterministic per input,
// spread over a run.
class Draw {
 public:
  explicit Draw(std::string_view text) : state_(XXH3_64bits(text.data(), text.size())) {}
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
  template <std::size_t N>
  int one_of(const int (&values)[N]) { return values[below(N)]; }

 private:
  std::uint64_t next() {
    std::uint64_t z = state_ += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::uint64_t state_;
};

// A tile as `--tile`/`--threads`/`--vec` could give it: each field from a set
// that straddles the family's bounds (docs/limits.md, check_tile).
TileConfig arbitrary_tile(const KernelSpec& spec, Draw& draw) {
  const MainloopKind kind = spec.mainloop.kind;
  if (has_row_reduction(spec)) {
    static constexpr int threads[] = {32, 128, 256, 1024, 0, 48, 2048};
    static constexpr int vec[] = {0, 1, 2, 4, 8, 16, 3};
    static constexpr int regs[] = {-1, 0, 1, 2, 16, 32, 33, -2};
    static constexpr int persistent[] = {1, 0, 2};
    const RowTile t{draw.one_of(threads), draw.one_of(vec), draw.one_of(regs), draw.one_of(persistent)};
    if (t.persistent <= 1 && !(std::get<RowTile>(parse_tile(t.str())) == t))
      fail("parse_tile(str()) is not the row tile");
    return t;
  }
  if (kind == MainloopKind::elementwise) {
    static constexpr int threads[] = {32, 64, 128, 256, 512, 1024, 0, 48, 2048};
    static constexpr int vec[] = {0, 1, 2, 4, 8, 16, 3, 32};
    static constexpr int blocks[] = {0, 1, 4, 16, 64, 65, -1};
    return ElementwiseTile{draw.one_of(threads), draw.one_of(vec), draw.one_of(blocks)};
  }
  static constexpr int mn[] = {16, 32, 64, 128, 256, 8, 512};
  static constexpr int bk[] = {32, 64, 8, 16, 128};
  static constexpr int warps[] = {1, 2, 4, 8, 3};
  static constexpr int stages[] = {2, 3, 4, 6, 8, 1, 9};
  static constexpr int group[] = {1, 8, 64, 0, 65};
  static constexpr int split[] = {1, 2, 4, 16, 0, 17};
  GemmTile t{draw.one_of(mn), draw.one_of(mn),     draw.one_of(bk),    draw.one_of(warps),
             draw.one_of(warps), draw.one_of(stages), draw.one_of(group), draw.one_of(split)};
  // The command line reads a gemm tile as text: str() must read back.
  if (!(parse_gemm_tile(t.str()) == t)) fail("parse_gemm_tile(str()) is not the tile");
  if (draw.below(2) == 0) return t;
  // A wgmma tile (sm_90a), in and out of range.
  static constexpr int hm[] = {128, 256, 64};
  static constexpr int hn[] = {64, 128, 256, 96};
  static constexpr int hstages[] = {2, 4, 6, 8, 1, 9};
  static constexpr int cluster[] = {1, 2, 3};
  static constexpr int pingpong[] = {0, 1, 2};
  const WgmmaTile w{draw.one_of(hm),    draw.one_of(hn),      64, draw.one_of(hstages), draw.one_of(group),
                    draw.one_of(cluster), draw.one_of(pingpong)};
  if (w.group_m >= 0 && w.pingpong <= 1 && !(std::get<WgmmaTile>(parse_tile(w.str())) == w))
    fail("parse_tile(str()) is not the wgmma tile");
  return w;
}

// The launch side of a kernel that needs no GPU: geometry and scratch for an
// H100's 132 multiprocessors. A UserError is a shape one launch cannot hold.
void check_launch(const KernelSpec& spec, const KernelSource& source, const Shape& shape) {
  const KernelFamily& family = family_for(spec);
  try {
    (void)family.geometry(source, shape, 132);
  } catch (const UserError&) {
  }
  (void)family.workspace(source, shape);
}

// A spec grad() made, as the torch ops compile it: the default tile, at the
// forward's shape. A UserError is a chain the generator does not run (a dual
// GEMM's [N] outputs, a row family without the reduction it needs); past
// emission nothing may throw.
void check_derived(const KernelSpec& spec, const Shape& shape) {
  (void)print(spec);
  (void)check_round_trip(spec);
  std::optional<KernelSource> source;
  try {
    source = emit_kernel(spec, shape);
  } catch (const UserError&) {
    return;
  }
  check_launch(spec, *source, shape);
}

// grad(spec) of an accepted chain: a UserError (nothing to differentiate, a
// gradient zero by construction), or a forward and a backward that are
// ordinary chains (docs/autodiff.md), the same for the round-tripped chain.
void check_grad(const KernelSpec& spec, const KernelSpec& again, const Shape& shape) {
  std::optional<GradResult> g;
  try {
    g = grad(spec);
  } catch (const UserError&) {
    return;
  }
  const GradResult g2 = grad(again);  // the same chain: must differentiate too
  if (signature_bytes(g2.forward) != signature_bytes(g->forward)) fail("grad of the round-tripped chain: another forward");
  if (signature_bytes(g2.backward) != signature_bytes(g->backward)) fail("grad of the round-tripped chain: another backward");
  if (g->forward.graph.outputs().size() < spec.graph.outputs().size()) fail("grad's forward lost an output");
  check_derived(g->forward, shape);
  const Shape flat{shape.m, shape.n, 0};  // the backward is elementwise (or rows) at [M,N]
  check_derived(g->backward, flat);
  if (spec.mainloop.kind != MainloopKind::gemm || spec.graph.outputs().empty()) return;
  KernelSpec dgrad;
  try {
    dgrad = as_gemm_epilogue(g->backward, "d" + spec.graph.outputs().front().name, spec.mainloop);
  } catch (const UserError&) {
    return;  // an upstream gradient the backward does not read as a full input
  }
  check_derived(dgrad, shape);
}

void check_chain(std::string_view text) {
  const std::optional<KernelSpec> spec = parse(text);
  if (!spec) return;
  (void)print(*spec);
  const KernelSpec again = check_round_trip(*spec);
  check_grad(*spec, again, shape_of(*spec));

  const Shape shape = shape_of(*spec);
  std::optional<KernelSource> source;
  try {
    source = emit_kernel(*spec, shape);
  } catch (const UserError&) {
    return;  // a chain the code generator does not support (a dual GEMM, mixed operand dtypes)
  }
  // Past this point a UserError is a bug too (it escapes), except where caught.
  // Generated text names no user text: the round-tripped spec (renamed values)
  // gives the same bytes (docs/style.md rule 6, docs/design.md §6).
  if (emit_kernel(again, shape).text != source->text) fail("the round-tripped spec emits different source");
  check_launch(*spec, *source, shape);

  Draw draw(text);
  // The tuner tries every candidate: each must be a tile the family accepts.
  const std::vector<TileConfig> candidates = tile_candidates(*spec, shape);
  if (!candidates.empty()) {
    const TileConfig& tile = candidates[draw.below(candidates.size())];
    const KernelSource tuned = emit_kernel(*spec, shape, tile, KernelPath::general);
    check_launch(*spec, tuned, shape);
  }
  // On sm_90a too: the wgmma candidates of f16/bf16 GEMMs, and their general
  // (mma.sync) path.
  const std::vector<TileConfig> hopper = tile_candidates(*spec, shape, "sm_90a");
  if (!hopper.empty()) {
    const TileConfig& tile = hopper[draw.below(hopper.size())];
    for (const KernelPath path : {KernelPath::fastest, KernelPath::general})
      check_launch(*spec, emit_kernel(*spec, shape, tile, path, "sm_90a"), shape);
  }
  const TileConfig tile = arbitrary_tile(*spec, draw);
  try {
    const KernelSource chosen = emit_kernel(*spec, shape, tile, KernelPath::fastest, "sm_90a");
    check_launch(*spec, chosen, shape);
  } catch (const UserError&) {
    // a tile out of the family's bounds, rejected as `--tile` would be
  }
}

}  // namespace
}  // namespace epifuse::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    epifuse::fuzz::check_chain(text);
  } catch (const std::exception& e) {
    // Not a UserError where one is expected: an InternalError (EPIFUSE_ASSERT)
    // or a library exception that escaped the checks. Name it, then crash.
    std::fprintf(stderr, "fuzz_chain: uncaught %s: %s\n", typeid(e).name(), e.what());
    std::abort();
  }
  return 0;
}
