// The Hopper mainloop (WgmmaTile, templates/gemm_sm90.cu.in, docs/hopper.md):
// a persistent grid; TMA fills a ring of BK tiles, a producer warp issues the
// copies and two consumer warpgroups the wgmma ops. sm_90a only. A key whose
// operands the copy engine cannot take runs the mma.sync fallback tile
// (k_wgmma_fallback_tile) as its general kernel.
#include <algorithm>

#include "codegen/column_sums.hpp"
#include "codegen/gemm/mainloop.hpp"
#include "epifuse/errors.hpp"

namespace epifuse {

namespace {

// On sm_90a problems from this many outputs up take wgmma tiles untuned (from
// 512^2 outputs an h128x64 tile ran 1.38-1.71x ahead of the mma.sync default,
// Note [Default GEMM tile]); from the second, only wgmma tiles are tuned. From 2048^2 outputs
// (128 tiles of 128x256 and more) the wgmma tiles beat every mma.sync one by
// a quarter or more (H100: 721 against 453 TFLOP/s at 4096^3, 745 against 646
// at 8192^3; docs/perf/gemm.md), so only they are compiled: the tuner's NVRTC time
// stays within its budget.
constexpr std::int64_t k_wgmma_min_outputs = 512 * 1024;
constexpr std::int64_t k_wgmma_only_outputs = 2048 * 2048;
// Fewer rows leave most of a 128-row tile idle: mma.sync's 16- and 32-row
// tiles win there (M = 16: 32x32 mma.sync tiles fastest, Note [Default GEMM tile]).
constexpr std::int64_t k_wgmma_min_rows = 64;
// Except tf32 (K-major): under 64 rows, from this many outputs, the ping-pong
// 64x128 tile ran 1.12-5.2x ahead of mma.sync's default (Note [Default GEMM tile]).
constexpr std::int64_t k_tf32_few_rows_min_outputs = 32 * 1024;
// A fragment epilogue that reads an [M,N] input takes 128x256 from this K and
// this many multiply-adds on (Note [Default GEMM tile]).
constexpr std::int64_t k_deep_k = 8192;
constexpr double k_large_work = 1099511627776.0;  // 2^40
// A fragment epilogue with two [M,N] tensors up to this K, or with more than
// two at any K, takes the two-block cluster from this many waves of 128x128
// tiles on (Note [Default GEMM tile]).
constexpr std::int64_t k_cluster_max_k = 2048;
constexpr std::int64_t k_cluster_min_waves = 16;
// A staged epilogue with more than one [M,N] tensor takes 128x256 from this
// K on (Note [Default GEMM tile]).
constexpr std::int64_t k_staged_deep_k = 4096;
// Between one wave of 128x128 tiles and two, 16-bit operands up to this K
// take the ping-pong 64x128 tile where it fills more (Note [Default GEMM tile]);
// up to the second, a staged epilogue takes 128x64 and tf32 the ping-pong 64x128.
constexpr std::int64_t k_short_k = 2048;
constexpr std::int64_t k_shorter_k = 1024;
// 192-column tiles where their waves hold this much more of the outputs than
// 128x128's: a staged epilogue, a fragment epilogue with one [M,N] tensor; and
// the fragment epilogue's cooperative 128x192 up to this many rows from this K
// (Note [Default GEMM tile]).
constexpr double k_fill_gain_staged = 0.04;
constexpr double k_fill_gain_fragment = 0.06;
constexpr std::int64_t k_192_few_rows = 1024;
constexpr std::int64_t k_192_deep_k = 2048;
// Few rows: the ping-pong 64x64 tile where its tiles, at least this many,
// fit one wave (Note [Default GEMM tile]).
constexpr std::int64_t k_small_tiles_min = 24;

// The [M,N] tensors an epilogue reads or writes besides the accumulator: its
// full outputs and full inputs (a residual, a saved pre-activation).
int full_tensors(const KernelSpec& spec) {
  const Graph& g = spec.graph;
  int n = 0;
  for (const Output& o : g.outputs()) n += g.node(o.value).broadcast == Broadcast::full ? 1 : 0;
  for (const Value v : g.inputs()) n += g.node(v).broadcast == Broadcast::full ? 1 : 0;
  return n;
}

bool wgmma_target(std::string_view target) { return target == "sm_90a"; }

// The 192-column tiles have run no batched and no strided problem on a GPU yet
// (their GPU tests are dense and unbatched): those problems keep to the other
// tiles, in the rule and among the tuner's candidates.
bool columns_192_tested(const GemmProblem& p) {
  const Mainloop& ml = p.spec.mainloop;
  return p.batches == 1 && !epilogue_strided(p.shape) &&
         !gemm_operand_strided(ml, p.shape, 0) && !gemm_operand_strided(ml, p.shape, 1) &&
         !gemm_operand_strided(ml, p.shape, 2);
}

// The operands wgmma reads: f16 and bf16 in any layout, and f32 through tf32
// (rounded by the copy engine, docs/hopper.md) K-major only (A row-major, B
// col-major: wgmma has no transposed tf32).
bool wgmma_operands(const Mainloop& ml) {
  if (ml.a == DType::f16 || ml.a == DType::bf16) return true;
  return ml.a == DType::f32 && ml.math == GemmMath::tf32 && ml.a_layout == Layout::row && ml.b_layout == Layout::col;
}
// A stage's rows are 128 bytes of K: 64 16-bit elements, 32 tf32 ones.
int wgmma_bk(const Mainloop& ml) { return ml.a == DType::f32 ? 32 : 64; }

// wgmma operands whose rows the copy engine can address (16-byte strides),
// on an sm_90a target, with coordinates that fit TMA's 32-bit ones.
bool wgmma_applies(const GemmProblem& p) {
  const Mainloop& ml = p.spec.mainloop;
  const Shape& s = p.shape;
  constexpr std::int64_t coord = 0x7fffffff;
  return wgmma_target(p.target) && wgmma_operands(ml) && gemm_shape_class(ml, s).starts_with("ld8") &&
         s.m <= coord && s.n <= coord && s.k <= coord && tiles_of(s, 128, 64) <= coord;
}

// The block's dynamic shared memory for this problem: col_sum outputs add
// their colbuf rows (Note [GEMM column sums]).
std::uint32_t shared_bytes(const WgmmaTile& t, const GemmProblem& p) {
  return wgmma_shared_bytes(t, p.dual, column_sum_count(p.spec));
}

class WgmmaMainloop final : public GemmMainloop {
 public:
  void check(const TileConfig& tile, const GemmProblem& p) const override {
    const WgmmaTile& t = std::get<WgmmaTile>(tile);
    const Mainloop& ml = p.spec.mainloop;
    const Shape& s = p.shape;
    EPIFUSE_CHECK(p.target.empty() || wgmma_target(p.target), "gemm tile {}: wgmma tiles run on sm_90a only, not {}",
                  t.str(), p.target);
    EPIFUSE_CHECK(wgmma_operands(ml),
                  "gemm tile {}: wgmma tiles take f16 or bf16 operands, or f32 with \"math\": \"tf32\" where A is "
                  "row-major and B col-major, not {}{} with A {} and B {}",
                  t.str(), to_string(ml.a), ml.math == GemmMath::tf32 ? " (tf32)" : "", to_string(ml.a_layout),
                  to_string(ml.b_layout));
    EPIFUSE_CHECK(s.m <= 0x7fffffff && s.n <= 0x7fffffff && s.k <= 0x7fffffff && tiles_of(s, t.bm, t.bn) <= 0x7fffffff,
                  "gemm tile {}: the copy engine's coordinates are 32-bit: M, N, K and the tile count must be below 2^31",
                  t.str());
    EPIFUSE_CHECK((t.bm == 128 || t.bm == 256 || (t.bm == 64 && t.pingpong)) &&
                      (t.bn == 64 || t.bn == 128 || t.bn == 192 || t.bn == 256) && t.bk == wgmma_bk(ml),
                  "gemm tile {}: a wgmma tile has BM 128 or 256 (or 64 ping-pong), BN 64, 128, 192 or 256, and BK {} ({} "
                  "operands: 128 bytes of K a row)",
                  t.str(), wgmma_bk(ml), to_string(ml.a));
    // BN 192: three 64-column blocks, which a cluster of two cannot halve; a
    // dual GEMM's two products would be one m64n384 wgmma, past n256.
    EPIFUSE_CHECK(t.bn != 192 || (t.cluster == 1 && !p.dual && columns_192_tested(p)),
                  "gemm tile {}: BN 192 runs without a cluster and on a single GEMM only, dense and unbatched", t.str());
    // A consumer warpgroup's rows: BM/2 cooperative, BM ping-pong; a thread holds rows x BN / 128 accumulators.
    // A dual GEMM holds two accumulators per element.
    const int rows = t.pingpong ? t.bm : t.bm / 2, per_thread = rows * t.bn / 128 * (p.dual ? 2 : 1);
    EPIFUSE_CHECK(t.pingpong == 0 || t.pingpong == 1, "gemm tile {}: ping-pong is 0 or 1", t.str());
    EPIFUSE_CHECK(per_thread <= 128, "{} tile {}: a consumer warpgroup holds {} accumulators a thread; at most 128",
                  to_string(ml.kind), t.str(), per_thread);
    EPIFUSE_CHECK(t.stages >= 2 && t.stages <= 8, "gemm tile {}: stages must be in [2, 8]", t.str());
    EPIFUSE_CHECK(t.group_m >= 1 && t.group_m <= 64, "gemm tile {}: group_m must be in [1, 64]", t.str());
    EPIFUSE_CHECK(t.cluster == 1 || t.cluster == 2,
                  "gemm tile {}: the cluster is 1, or 2 (each block copies half of B: half its columns, or with BN 64 "
                  "and B row-major half its k rows)",
                  t.str());
    EPIFUSE_CHECK(shared_bytes(t, p) <= p.device.shared_per_block,
                  "gemm tile {}: needs {} bytes of shared memory, more than the {} a block can have", t.str(),
                  shared_bytes(t, p), p.device.shared_per_block);
  }

  // Note [Default GEMM tile]: measured, not modelled in detail. Over 67
  // shapes on an H200 (docs/perf/default-tiles.md) the ping-pong 128x128 tile
  // was the fastest single-GEMM candidate, or within 4% of it, wherever the
  // 128x128 tiles fill a wave of the SMs (the 128x256 default it replaced ran
  // 1.05-1.16x behind at 4096^3, 8192^3 and the wide-N shapes); the dual
  // GEMM's ping-pong 128x64 was the fastest or tied. Under a wave the tile
  // that fills more of one wave's slots wins (h128x64 at 1024^3: 1.38x ahead
  // of 128x128, whose 64 tiles leave half the SMs idle); where both fill alike,
  // the wider one (fewer bytes of L2 a FLOP). An epilogue with more than one
  // [M,N] tensor (a training forward's saved pre-activation, a residual) keeps
  // the cooperative 128x256 tile where its tiles fill the GPU: on an H100 the
  // MLP blocks' training steps ran 1.17-1.20x their GEMMs with the ping-pong
  // tile against 1.10-1.13x with 128x256 (same run, 2026-11-27), and the
  // sweep's forwards with a saved output had 128x256 or 256x128 ahead by up to
  // 5% at 12288x4096x12288. Those epilogues are staged (dropout, two
  // outputs); a fragment epilogue that reads an [M,N] input (a dgrad's saved
  // pre-activation, a residual), with its inputs loaded ahead (Note
  // [Prefetched epilogue inputs]), takes the ping-pong tile: dgrad + dGELU +
  // dbias at 8192^3 and 4096^3 1.05x and 1.08x cuBLAS against 1.12x and 1.24x
  // on 128x256, a residual add 0.98x against 1.06x (H100, same runs, 2026-11-27).
  // Except deep and large: from K = 8192 and 2^40 multiply-adds, where the
  // group's operand panels (8 x 128 rows of K) and the input's stream share
  // the L2, 128x256 (fewer L2 bytes a FLOP) won every shape tuned: dgrad +
  // dGELU + dbias at 16384x32768x8192 1.15x cuBLAS against 1.57x ping-pong;
  // below either bound ping-pong won or tied (16384^2x4096, 8192^3).
  // Where a fragment epilogue's extra [M,N] tensors make the mainloop wait on
  // its copies (docs/perf/backward.md, "Where the second [M,N] tensor's time
  // goes"), a cluster of two ping-pong blocks, each copying half of the B tile
  // they share, runs ahead: with two tensors at K = 2048 (a forward writing
  // its saved pre-activation 9-12%, dgrad + dGELU + dbias 4.5-6% at
  // 8192^2x2048 and 16384x8192x2048), with four (the SwiGLU dgrad's two saved
  // inputs and two outputs) 6-34% at 8192x5504x2048, 8192x11008x4096 and
  // 16384x11008x4096 (H100, in turns, 2026-11-27). Not below 16 waves, where
  // it lost 6-13% (2048x8192x2048, 4096^3), nor with two tensors at K = 4096,
  // where it won for one chain and lost for another (8192x16384x4096), nor
  // with one tensor (7-11% slower).
  // A batched launch of 2^40 multiply-adds and more runs at the power limit
  // (700 W on an H100, the SM clock dipping to 1.35-1.47 GHz), where the
  // cooperative 128x256 tile does more work a joule than ping-pong: 256 x
  // 2048^3 bf16 ran 1.08x cuBLASLt's strided-batched GEMM on it against 1.35x
  // on ping-pong, and 128 x 2048^3 1.11x on ping-pong; at 32 x 2048^3
  // ping-pong ran 0.98x, 128x256 1.01x (H100, in turns, 2026-11-27).
  // Under a wave, where the fill rule picks the 128x64 tiles, the ping-pong
  // 64x128 tile (bf16, H100, in turns, 2026-11-27; docs/perf/default-tiles.md)
  // ran 0.58x and 0.69x their time with a partial last row tile (M = 160, 192
  // at N = K = 4096; the 128x128 tiles 0.74x and 0.82x), 0.95x at 64 rows,
  // 0.78x at 1024x1024x4096 and 0.91x at 4096x256x4096; it lost with one or
  // two whole row tiles (128 and 256 rows at N = K = 4096: 1.30x and 1.25x)
  // and tied at K = 1024 (1024^3 1.01x, 512x1024x1024 1.03x). Between one
  // wave of 128x128 tiles and two the fill rule is not applied: at
  // 768x3072x768 the ping-pong 128x128 tile (144 tiles, 55% of two waves'
  // slots) ran 1.11-1.16x the fastest, 128x64 1.00-1.09x, over five chains.
  // Measured there since (bias+GELU, bias+ReLU+dropout and tf32, the four
  // tiles in turns, H100, 2026-11-27; docs/perf/default-tiles.md): with
  // 16-bit operands and K <= 2048 (768x3072x768, 1024x2560x1024,
  // 1280x2048x2048, 1536x2048x1024, 2048x1536x2048) the ping-pong 64x128 tile
  // was the fastest or within 5.6% of it, where ping-pong 128x128 ran
  // 1.03-1.15x; at K = 4096 (768x4096x4096) ping-pong 128x128 won and 64x128
  // ran 1.05-1.14x; tf32 went either way. Where the narrow tiles do not fill
  // more (1152x3072x1536, 1664x2048x4096) ping-pong 128x128 won. Up to
  // K = 1024 a staged epilogue (bias+ReLU+dropout, a training forward) ran
  // fastest on 128x64 at 768x3072x768, 1024x2560x1024 and 1536x2048x1024
  // (64x128 1.01-1.06x behind, H100; 1.04-1.05x, H200), and at K = 2048 on
  // 64x128 (128x64 1.09-1.20x behind). tf32 up to K = 1024 takes the ping-pong
  // 64x128: 1.00x and 1.08x the fastest at 1024x2560x1024 and 768x3072x768
  // where 128x64 ran 1.18x and 1.00x and ping-pong 128x128 1.02x and 1.11x
  // (H100; 768x3072x768 on an H200: 1.06x, 1.00x, 1.13x); at K = 2048
  // ping-pong 128x128 won (2048x1536x2048, 64x128 1.14x behind).
  // At 64 rows a staged epilogue with 16-bit operands goes to mma.sync, whose
  // 64x64 tile in six stages ran 1.05x ahead of the ping-pong 64x128 with
  // bias+ReLU+dropout and 1.00-1.03x with a training forward at 64x8192x4096
  // (three H100 runs and one H200 run, 2026-11-27); a fragment epilogue ran
  // level or ahead on 64x128 (bias+GELU 1.00-1.07x ahead).
  // tf32 (K-major) under 64 rows takes the ping-pong 64x128 too: it was the
  // fastest candidate at every shape tried (16, 32 and 48 x 4096 x 4096,
  // 16x8192x2048, 32x1024x1024, 16x14336x4096, 32x2048x8192; H200,
  // 2026-11-28), where mma.sync's default ran 1.12-2.17x its time, and 5.2x
  // at 16x14336x4096 (its 128x256 tile). With 16-bit operands the same tile
  // ran 1.21-1.29x mma.sync's 32x32 at 16x4096x4096: theirs stays mma.sync.
  // A staged epilogue with more than one [M,N] tensor (the training forward
  // with dropout and its saved pre-activation) lost 3-16% on 128x256 to the
  // ping-pong 128x128 at K = 1536-3072 (validation runs on an H100 and an
  // H200, 2026-11-27), so it takes 128x256 only from K = 4096: there 128x256
  // ran level with ping-pong or ahead (16384^2x4096 1.06x against 1.07x, the
  // cluster-of-two ping-pong 1.00x; 8192^3 1.00x against 1.14x). A staged
  // epilogue with one [M,N] tensor (bias+ReLU+dropout) takes it from K = 8192:
  // at 12288x4096x12288 ping-pong ran 1.10-1.15x the 128x256 tile (H100), at
  // 16384x4096x16384, 8192x2048x8192 and 8192^3 the two were within 2.2%
  // (H200), and below K = 8192 ping-pong won or came within 4%. tf32 operands
  // (BK 32, twice the stages a K) take 128x256 from K = 4096: at
  // 4096x14336x4096, 8192x1536x6144 and 12288x4096x12288 ping-pong ran
  // 1.03-1.12x, 1.05-1.16x and 1.23-1.27x the fastest, which 128x256 was or
  // came within 0.4% of (H100, two runs); at K = 3072 and below ping-pong won
  // or came within 1%, 128x256 1.05-1.20x behind at 1536-3072 rows.
  // 192 columns (H200, every candidate in turns, 2026-11-28; docs/perf/
  // default-tiles.md): where the 128x128 tiles leave a wave mostly idle and
  // 128x192 ones do not (3072^3: 576 tiles, 4.4 waves, against 384 in 2.9),
  // a staged epilogue ran fastest on the cooperative 128x192 tile, or within
  // 0.5% of it, at all 15 such shapes of bias+ReLU+dropout and of a training
  // forward, from 512 to 14336 rows and K = 768 to 5120; the default had run
  // 1.04-1.33x behind (a forward's 128x256 at 6144x1536x4096 1.28x). A
  // fragment epilogue (bias+GELU) ran fastest on the ping-pong 64x192 or
  // within 1.6%, where 128x128 ran 1.00-1.08x and the narrow tiles between one
  // wave and two 1.06-1.13x, except with few rows and a deep K (768x12288x2048,
  // 768x4096x4096, 512x6144x2048), where 64x192 ran 1.01-1.14x and the
  // cooperative 128x192 0-1.9% from the fastest. The gain needs a margin:
  // where 128x128's waves hold 93% of the outputs against 97% for 128x192
  // (14336x1536x2048, 1536x14336x4096, 2560x11008x4096) the staged epilogue
  // still gained 4-8% but the fragment one lost 4% on 64x192. Where the
  // 128x128 tiles fill their waves (4096^3, 8192^3, 2048x8192x2048) 192
  // columns ran 1.01-1.25x behind. tf32 (f32 outputs: staged) took the
  // cooperative 128x192 as well: the fastest at 8 of 9 shapes, 1.015x at the
  // ninth. Not measured, so not taken: a dual GEMM (BN 192 does not fit its
  // one wgmma) and fragment epilogues with column sums or more than one [M,N]
  // tensor (a dgrad, a residual); batched and strided problems, untested on
  // these tiles, keep to the others (columns_192_tested).
  // Few rows (H200, every candidate in turns, 2026-11-28; docs/perf/
  // default-tiles.md, "Few rows"): in whole 64-row tiles (64 to 512 rows),
  // where the ping-pong 64x64 tile's 24 to 132 tiles fit one wave, it was the
  // fastest candidate at all 51 such measurements (bias+GELU with either B
  // layout, bias+ReLU+dropout; N 1024-8192, K 1024-14336), where the defaults
  // it replaced (mma.sync's 64x64 tiles, which most of these shapes had for
  // their few outputs, the cooperative 128x64, the ping-pong 64x128) ran
  // 1.12-3.18x its time. Under a wave B is nearly all of the bytes, and each
  // SM streams one tile's panel of it: twice the tiles, twice the SMs pulling
  // B. Past a wave (224 and 172 tiles at 64x14336x4096 and 64x11008x4096) it
  // ran 1.02-1.19x behind the ping-pong 64x128, and with a partial last row
  // tile (80, 96, 112 rows) 1.07-1.44x behind: under 128 rows the ping-pong
  // 64x128 takes those where its tiles fit a wave, the fastest at 80 and 96
  // rows and at 64 x 11008 and 14336 (1.03-1.05x at 112 rows, where 128x64
  // won). Not timed, so left to the rules below: fewer than 24 tiles, tf32,
  // dual GEMMs, batched launches and column sums.
  std::optional<TileConfig> heuristic(const GemmProblem& p) const override {
    if (!wgmma_applies(p)) return std::nullopt;
    const int bk = wgmma_bk(p.spec.mainloop);
    const WgmmaTile pingpong{128, 128, bk, 6, 8, 1, 1}, pingpong_64{64, 128, bk, 5, 8, 1, 1};
    // Column sums' colbuf rows take shared memory: the ring gives up stages.
    const auto fitted = [&](WgmmaTile t) -> std::optional<TileConfig> {
      while (t.stages > 2 && shared_bytes(t, p) > p.device.shared_per_block) --t.stages;
      if (shared_bytes(t, p) > p.device.shared_per_block) return std::nullopt;
      return t;
    };
    const bool tf32 = p.spec.mainloop.a == DType::f32;
    // tf32 under 64 rows: the ping-pong 64x128 tile, not mma.sync's.
    if (tf32 && !p.dual && p.shape.m < k_wgmma_min_rows && p.shape.m * p.shape.n >= k_tf32_few_rows_min_outputs)
      return fitted(pingpong_64);
    // Few rows: the ping-pong 64x64 tile in whole 64-row tiles, or under 128
    // rows the ping-pong 64x128, where its tiles fit one wave; before the
    // mma.sync tiles below.
    const std::int64_t sms = std::max(p.device.multiprocessors, 1);
    if (!p.dual && !tf32 && p.batches == 1 && !has_column_sums(p.spec)) {
      const auto one_wave = [&](std::int64_t tiles) { return tiles >= k_small_tiles_min && tiles <= sms; };
      if (p.shape.m % 64 == 0 && one_wave(tiles_of(p.shape, 64, 64)))
        return fitted(WgmmaTile{64, 64, bk, 8, 8, 1, 1});
      if (p.shape.m >= k_wgmma_min_rows && p.shape.m < 128 && one_wave(tiles_of(p.shape, 64, 128)))
        return fitted(pingpong_64);
    }
    if (p.shape.m < k_wgmma_min_rows || p.shape.m * p.shape.n < k_wgmma_min_outputs) return std::nullopt;
    const bool fragment = wgmma_fragment_chain(p.spec);
    // 64 rows, a deep K and a staged epilogue with 16-bit operands: mma.sync's
    // 64x64 tile in six stages.
    if (!p.dual && !tf32 && !fragment && few_rows_deep_k(p.shape)) return std::nullopt;
    const std::int64_t wide = tiles_of(p.shape, 128, 128), narrow = tiles_of(p.shape, 128, 64);
    WgmmaTile t = p.dual ? WgmmaTile{128, 64, bk, 6, 8, 1, 1} : pingpong;
    const double work = static_cast<double>(p.shape.m) * static_cast<double>(p.shape.n) * static_cast<double>(p.shape.k);
    const bool deep_and_large = p.shape.k >= k_deep_k && work >= k_large_work;
    const bool wide_tiles_fill = tiles_of(p.shape, 128, 256) >= sms;
    const int tensors = full_tensors(p.spec);
    const bool staged_and_deep = !fragment && p.shape.k >= (tensors > 1 ? k_staged_deep_k : k_deep_k);
    const bool tf32_and_deep = tf32 && p.shape.k >= k_staged_deep_k;
    if (!p.dual && ((tensors > 1 && deep_and_large) || staged_and_deep || tf32_and_deep) && wide_tiles_fill)
      t = WgmmaTile{128, 256, bk, 4, 8};
    else if (!p.dual && fragment && wide >= k_cluster_min_waves * sms &&
             (tensors > 2 || (tensors == 2 && p.shape.k <= k_cluster_max_k)))
      t = WgmmaTile{128, 128, bk, 6, 8, 2, 1};
    const bool batched_and_large = p.batches > 1 && work >= k_large_work;
    if (batched_and_large && !p.dual && t == pingpong && wide_tiles_fill) t = WgmmaTile{128, 256, bk, 4, 8};
    const bool narrow_fills_more = wave_fill(narrow, sms) > wave_fill(wide, sms) + 0.05;
    // Where the narrow tiles win, the ping-pong 64x128 one (a warpgroup a
    // tile, 64-row steps) does better with a partial last row tile, or with
    // eight row tiles and more at K >= 4096.
    const bool ragged = p.shape.m % 128 != 0;
    const bool tall_and_deep = p.shape.m >= 8 * 128 && p.shape.k >= 4096;
    const WgmmaTile narrow_tile = ragged || tall_and_deep ? pingpong_64 : WgmmaTile{128, 64, bk, 8, 8};
    if (wide < sms) {
      if (p.dual) t = narrow_fills_more ? WgmmaTile{128, 64, bk, 6, 8} : WgmmaTile{128, 128, bk, 4, 8};
      else if (!narrow_fills_more) t = WgmmaTile{128, 128, bk, 6, 8};
      else t = narrow_tile;
      // 64 rows: a 128-row tile is half idle.
      if (p.dual && p.shape.m <= 64) t = pingpong_64;
    } else if (!p.dual && wide < 2 * sms && narrow_fills_more && t == pingpong) {
      if (!tf32 && p.shape.k <= k_short_k)
        t = fragment || p.shape.k > k_shorter_k ? pingpong_64 : WgmmaTile{128, 64, bk, 8, 8};
      else if (tf32 && p.shape.k <= k_shorter_k)
        t = pingpong_64;
    }
    // Where 192-column tiles fill the waves better than 128x128 ones.
    if (!p.dual && columns_192_tested(p) && wide >= sms &&
        (!fragment || (!tf32 && tensors == 1 && !has_column_sums(p.spec)))) {
      const double gain = output_fill(p.shape, 128, 192, sms) - output_fill(p.shape, 128, 128, sms);
      if (gain >= (fragment ? k_fill_gain_fragment : k_fill_gain_staged)) {
        const bool few_rows_deep_k = p.shape.m <= k_192_few_rows && p.shape.k >= k_192_deep_k;
        t = fragment && !few_rows_deep_k ? WgmmaTile{64, 192, bk, 5, 8, 1, 1} : WgmmaTile{128, 192, bk, 5, 8};
      }
    }
    return fitted(t);
  }

  // The dual GEMM's hold two accumulators a thread: 64 + 64 a consumer thread.
  // The ping-pong tiles (each warpgroup a whole 128x64 or 64x128 dual tile)
  // come last.
  // Tiles that do not fit the block's shared memory (column sums' colbuf
  // rows beside the largest rings) are left out.
  std::vector<TileConfig> candidates(const GemmProblem& p) const override {
    if (!wgmma_applies(p)) return {};
    const int bk = wgmma_bk(p.spec.mainloop);
    std::vector<TileConfig> out;
    if (p.dual)
      out = {WgmmaTile{128, 128, bk, 4, 8}, WgmmaTile{128, 128, bk, 4, 8, 2}, WgmmaTile{128, 64, bk, 6, 8},
             WgmmaTile{128, 64, bk, 6, 8, 1, 1}, WgmmaTile{64, 128, bk, 5, 8, 1, 1}};
    else
      out = {WgmmaTile{128, 256, bk, 4, 8}, WgmmaTile{128, 256, bk, 4, 8, 2}, WgmmaTile{256, 128, bk, 4, 8},
             WgmmaTile{256, 128, bk, 4, 8, 2}, WgmmaTile{128, 128, bk, 6, 8}, WgmmaTile{128, 128, bk, 6, 8, 1, 1},
             WgmmaTile{128, 64, bk, 8, 8}, WgmmaTile{64, 128, bk, 5, 8, 1, 1}, WgmmaTile{64, 64, bk, 8, 8, 1, 1}};
    if (!p.dual && columns_192_tested(p)) {
      out.push_back(WgmmaTile{128, 192, bk, 5, 8});
      out.push_back(WgmmaTile{64, 192, bk, 5, 8, 1, 1});
    }
    std::erase_if(out, [&](const TileConfig& c) { return shared_bytes(std::get<WgmmaTile>(c), p) > p.device.shared_per_block; });
    return out;
  }

  // Persistent: one block per SM (the ring takes its shared memory), each
  // walking tiles blockIdx.x, + gridDim.x, ...; a cluster's blocks walk units
  // of `cluster` vertically adjacent tiles. The general path is the mma.sync
  // fallback tile's kernel.
  LaunchGeometry geometry(const KernelSource& source, const Shape& shape, int multiprocessors) const override {
    const WgmmaTile& w = std::get<WgmmaTile>(source.tile);
    if (source.path != KernelPath::fastest) return gemm_tile_geometry(k_wgmma_fallback_tile, shape, source.shared_bytes);
    // Note [Batched GEMM]: the walk runs over every batch's units (32-bit in the kernel).
    const std::int64_t units = tiles_of(shape, std::int64_t{w.bm} * w.cluster, w.bn) * shape.batch;
    EPIFUSE_CHECK(units <= 0x7fffffff, "gemm: batch {} of {}x{} needs {} tile units, more than one launch holds",
                  shape.batch, shape.m, shape.n, units);
    const std::int64_t slots = multiprocessors > 0 ? multiprocessors / w.cluster : units;
    LaunchGeometry g;
    g.grid[0] = static_cast<unsigned>(std::min(units, slots) * w.cluster);
    g.block[0] = 384;
    g.shared_bytes = source.shared_bytes;
    return g;
  }

  // Column sums (Note [GEMM column sums]): a counter per column tile (zeroed)
  // and a partial row per row tile and output (scratch), as mma.sync's; the
  // general path is the fallback tile's mma.sync kernel, counted in its tiles.
  WorkspaceNeeds workspace(const KernelSource& source, const Shape& shape) const override {
    WorkspaceNeeds w;
    if (!gemm_sums_columns(source)) return w;
    const WgmmaTile& t = std::get<WgmmaTile>(source.tile);
    const bool fallback = source.path != KernelPath::fastest;
    add_column_sum_workspace(w, source, shape, fallback ? k_wgmma_fallback_tile.bm : t.bm,
                             fallback ? k_wgmma_fallback_tile.bn : t.bn);
    return w;
  }

  KernelSource emit(const GemmPlan& g) const override { return emit_gemm_sm90(g); }
};

}  // namespace

bool wgmma_only(const GemmProblem& p) { return p.shape.m * p.shape.n >= k_wgmma_only_outputs; }

// The field's index says which operand and layout (TensorMapIndex).
std::optional<TensorMap2d> wgmma_tensor_map(const ParamField& field, const OpaqueContext& c) {
  const auto& t = std::get<WgmmaTile>(c.source.tile);
  const auto m = static_cast<std::uint64_t>(c.shape.m), n = static_cast<std::uint64_t>(c.shape.n),
             k = static_cast<std::uint64_t>(c.shape.k);
  const auto bm = static_cast<unsigned>(t.bm), bn = static_cast<unsigned>(t.bn);
  // A box row is 128 bytes: BK 64 of 16-bit elements, or 32 f32 ones that
  // the copy engine rounds to tf32 on the way (docs/hopper.md).
  const int es = 128 / t.bk;
  const auto box_inner = static_cast<unsigned>(t.bk);
  // MN-major B: [64 k][64 n] boxes; with a cluster and one such block (BN 64)
  // each block copies half of its k rows.
  const unsigned nmajor_box = t.bn / 64 >= t.cluster ? 64u : 64u / static_cast<unsigned>(t.cluster);
  // An operand's row stride in elements: its ld (Note [Strided operands]),
  // the dense rows' length (`inner`) where the shape gives none.
  const std::int64_t lds[] = {c.shape.lda, c.shape.ldb, c.shape.ldb1};
  const std::int64_t batch_strides[] = {c.shape.batch_stride_a, c.shape.batch_stride_b, c.shape.batch_stride_b1};
  auto map = [&](int operand, std::uint64_t inner, std::uint64_t outer,
                 unsigned box_outer) -> std::optional<TensorMap2d> {
    const std::uint64_t base = c.inputs[static_cast<std::size_t>(operand)];
    const std::int64_t ld = lds[operand];
    const std::uint64_t stride = ld != 0 ? static_cast<std::uint64_t>(ld) : inner;
    // A base or a row stride the copy engine cannot take sends the launch to
    // the general kernel (KernelSource::requires_alignment), which has no
    // maps; an empty K is never loaded. Neither needs a map.
    if (base % 16 != 0 || inner == 0 || outer == 0 || (stride * es) % 16 != 0) return std::nullopt;
    TensorMap2d out{base, inner, outer, stride * es, box_inner, box_outer, es, es == 4};
    if (c.shape.batch > 1) {
      // Note [Batched GEMM]: a 3-D map, the batch outermost. A shared operand
      // (batch stride 0) or a stride that is not a multiple of 16 bytes has no
      // map: the launch takes the general kernel (Jit::Impl::pack_params).
      const std::int64_t given = batch_strides[operand];
      const std::uint64_t batch = given == Shape::dense_batch ? outer * stride : static_cast<std::uint64_t>(given);
      if (batch == 0 || (batch * es) % 16 != 0) return std::nullopt;
      out.batches = static_cast<std::uint64_t>(c.shape.batch);
      out.batch_bytes = batch * es;
    }
    return out;
  };
  switch (field.index) {
    case a_kmajor_map: return map(0, k, m, bm);              // [M][K]
    case a_mmajor_map: return map(0, m, k, 64);              // [K][M] (16-bit)
    case b_kmajor_map: return map(1, k, n, bn / t.cluster);  // [N][K], a block's share
    case b_nmajor_map: return map(1, n, k, nmajor_box);      // [K][N]
    case b1_kmajor_map: return map(2, k, n, bn / t.cluster);
    case b1_nmajor_map: return map(2, n, k, nmajor_box);
    default: EPIFUSE_ASSERT(false, "unknown tensor map {}", field.index);
  }
  return std::nullopt;
}

const GemmMainloop& wgmma_mainloop() {
  static const WgmmaMainloop mainloop;
  return mainloop;
}

}  // namespace epifuse
