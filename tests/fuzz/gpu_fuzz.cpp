// Random chains on a GPU against the CPU reference (docs/fuzzing.md, "On a
// GPU"). Where the libFuzzer targets stop at emission, this one runs what it
// generates: a chain drawn at random (elementwise, row, GEMM or dual GEMM; ops,
// broadcasts, dtypes, dropout, casts, column sums, extra outputs), a shape, a
// tile (the default or one of the tuner's candidates), sometimes pointers off their
// vectors' alignment (the general kernel), strided
// tensors or a batch, and, where grad() differentiates the chain, its forward
// with saved state, its backward and a single GEMM's dgrad epilogue. Each case
// is checked three ways:
//   reference: every output within its dtype's tolerance of the CPU reference
//     (as `epifuse run --verify`: a GEMM's accumulators moved by their
//     accumulation bound span an interval). An element outside it that the
//     conditioning of the chain explains is counted, not failed: within its
//     tolerance of the double-precision value plus 4x the largest error the
//     reference's own f32 evaluation (and the accumulators' moves) make on
//     that output. A gross error (a wrong index, a lost write, a race) is far
//     outside both;
//   repeat: a second launch gives the same bits (§4's masks, fixed-order sums);
//   strided: a case with strided tensors gives the bits of its dense copy on
//     the tile the strided shape resolved to (docs/strided-batched.md).
// A failure writes a repro (the chain, shape, strides, tile, seeds and the
// message) to the output folder and the run goes on; the exit status is 1 when
// any case failed. Before each launch the case is written to current-PID.json,
// so a hang leaves its repro behind.
//
//   build/epifuse_gpu_fuzz [--seed S] [--cases N] [--seconds T] [--out DIR]
//                          [--dry-run [--target sm_90a]] [--print] [--case CASE_SEED]
//
// --case runs the one case of a repro's "case_seed" (the chain, its backward and
// dgrad as this build draws them).
//
// --dry-run needs no GPU: it draws the same cases, emits each kernel for
// --target and evaluates the reference on the smallest of them (the ctest
// case, which keeps the generator honest in CI). tools/gpu_fuzz.sh runs a
// process per core on a GPU machine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "epifuse/autodiff.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/compare.hpp"
#include "epifuse/dgrad.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/json.hpp"
#include "epifuse/reference.hpp"
#include "epifuse/tile.hpp"
#define DOCTEST_CONFIG_DISABLE  // the header's checks are for the test binary; column_terms is plain
#include "../gpu/column_sum_checks.hpp"  // column_terms: what a col_sum adds up
#include "random_chain.hpp"

namespace {

using namespace epifuse;
using namespace epifuse::fuzz;
using Json = nlohmann::ordered_json;

// One kernel to run: a spec, its shape and launch, the tile asked for.
struct Case {
  std::string what;  // "forward", "grad forward", "backward", "dgrad"
  KernelSpec spec;
  Shape shape;
  std::optional<TileConfig> tile;
  LaunchArgs args;
  std::uint64_t data_seed = 0;
  TensorMap given;  // inputs bound from an earlier case (a backward's saved state)
  std::size_t misalign = 0;  // elements every device pointer is shifted by (the general kernel)
};

// ---------------------------------------------------------------------------
// Repro files and reporting.

Json shape_json(const Shape& s) {
  Json j = {{"m", s.m}, {"n", s.n}, {"k", s.k}};
  if (s.batch > 1) j["batch"] = s.batch;
  if (s.lda) j["lda"] = s.lda;
  if (s.ldb) j["ldb"] = s.ldb;
  if (s.ldb1) j["ldb1"] = s.ldb1;
  if (strided(s)) {
    j["ld_inputs"] = s.ld_inputs;
    j["ld_outputs"] = s.ld_outputs;
  }
  return j;
}

Json case_json(const Case& c, std::uint64_t case_seed) {
  return {{"case_seed", case_seed},
          {"what", c.what},
          {"shape", shape_json(c.shape)},
          {"tile", c.tile ? to_string(*c.tile) : "default"},
          {"seed", c.args.seed},
          {"offset", c.args.offset},
          {"data_seed", c.data_seed},
          {"misalign_elements", c.misalign},
          {"chain", spec_to_json(c.spec)}};
}

void write_json(const std::filesystem::path& path, const Json& j) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp);
    f << j.dump(2) << "\n";
  }
  std::filesystem::rename(tmp, path);
}

struct Stats {
  std::int64_t drawn = 0, rejected = 0, unsupported = 0, run = 0, strided = 0, batched = 0, tiled = 0, misaligned = 0;
  std::int64_t explained = 0, branch_flips = 0, general_path = 0, failed = 0;
  std::map<std::string, std::int64_t> by_what;
  std::map<std::string, std::int64_t> unsupported_why;
};

// ---------------------------------------------------------------------------
// The checks.

// Every output against the reference (see the file's comment). Returns "" when
// it passes, else the first failure's message. Counts explained elements.
std::string check_reference(const Case& c, const TensorMap& inputs, const TensorMap& got, Stats& stats) {
  const TensorMap want = evaluate(c.spec, c.shape, inputs, c.args);
  std::vector<TensorMap> moved;
  if (const double bound = accumulation_bound(c.spec, c.shape, inputs); bound > 0) {
    const bool dual = c.spec.mainloop.kind == MainloopKind::dual_gemm;
    for (const float s0 : {-1.0f, 1.0f})
      for (const float s1 : dual ? std::vector<float>{-1.0f, 1.0f} : std::vector<float>{0.0f}) {
        EvalOptions o;
        o.accumulator_shift = {static_cast<float>(s0 * bound), static_cast<float>(s1 * bound)};
        moved.push_back(evaluate(c.spec, c.shape, inputs, c.args, o));
      }
  }
  std::optional<DoubleTensors> exact;  // evaluated once, when an output needs it
  for (const Output& o : c.spec.graph.outputs()) {
    const HostTensor& w = want.at(o.name);
    const HostTensor& x = got.at(o.name);
    std::vector<const HostTensor*> wants = {&w};
    for (const TensorMap& m : moved) wants.push_back(&m.at(o.name));
    const Tolerance tol = tolerance_for(o.dtype, c.spec.precision);
    const Comparison cmp = compare_within(x, wants, tol);
    if (cmp.ok) continue;
    if (x.shape != w.shape) return o.name + ": " + cmp.message;
    // A column sum's error is relative to its terms' magnitudes, not to the sum.
    const Node& on = c.spec.graph.node(o.value);
    std::vector<double> term_magnitude;
    if (on.kind == NodeKind::op && on.op == OpKind::col_sum) {
      const TensorMap t = evaluate(testing::column_terms(c.spec), dense_of(c.shape), inputs, c.args);
      const HostTensor& terms = t.at(o.name);
      term_magnitude.assign(static_cast<std::size_t>(x.numel()), 0.0);
      for (std::int64_t b = 0; b < c.shape.batch; ++b)
        for (std::int64_t r = 0; r < c.shape.m; ++r)
          for (std::int64_t j = 0; j < c.shape.n; ++j)
            term_magnitude[static_cast<std::size_t>(j)] += std::fabs(terms.get((b * c.shape.m + r) * c.shape.n + j));
    }
    // The double-precision values; a batched GEMM's reference stays f32 (its
    // moved accumulators still give the scale).
    std::vector<double> d(static_cast<std::size_t>(w.numel()));
    if (c.shape.batch > 1) {
      for (std::int64_t i = 0; i < w.numel(); ++i) d[static_cast<std::size_t>(i)] = w.get(i);
    } else {
      if (!exact) {
        DoubleTensors in;
        for (const auto& [name, t] : inputs) {
          std::vector<double> v(static_cast<std::size_t>(t.numel()));
          for (std::int64_t i = 0; i < t.numel(); ++i) v[static_cast<std::size_t>(i)] = t.get(i);
          in.emplace(name, std::move(v));
        }
        exact = evaluate_double(c.spec, c.shape, in, c.args);
      }
      d = exact->at(o.name);
    }
    double scale = 0;  // the reference's own error on this output, and the accumulators' moves
    for (std::int64_t i = 0; i < w.numel(); ++i) {
      const double wi = w.get(i);
      if (!std::isfinite(wi) || !std::isfinite(d[static_cast<std::size_t>(i)])) continue;
      scale = std::max(scale, std::fabs(wi - d[static_cast<std::size_t>(i)]));
      for (const TensorMap& m : moved) scale = std::max(scale, std::fabs(double(m.at(o.name).get(i)) - wi));
    }
    std::int64_t bad = 0, first = -1, here = 0;
    for (std::int64_t i = 0; i < w.numel(); ++i) {
      const double xi = x.get(i), wi = w.get(i), di = d[static_cast<std::size_t>(i)];
      const double terms = term_magnitude.empty() ? 0.0 : (tol.rtol + 1e-5) * term_magnitude[static_cast<std::size_t>(i)] +
                                                              tol.atol * static_cast<double>(c.shape.m);
      bool ok;
      if (std::isnan(wi) || std::isinf(wi))
        ok = std::isnan(wi) ? std::isnan(xi) : xi == wi || (std::isfinite(di) && std::fabs(xi - di) <= 4 * scale);
      else
        ok = std::isfinite(xi) && (std::fabs(xi - wi) <= tol.atol + tol.rtol * std::fabs(wi) ||
                                   std::fabs(xi - di) <= tol.atol + tol.rtol * std::fabs(di) + 4 * scale + terms);
      if (!ok && first < 0) first = i;
      bad += !ok;
      here += ok && !(std::isfinite(xi) && std::fabs(xi - wi) <= tol.atol + tol.rtol * std::fabs(wi));
    }
    stats.explained += here;
    // A branch crossed on one side and not the other: a few elements off by
    // whole terms (and the row or column sums they enter).
    if (bad > 0 && has_branches(c.spec) && bad <= std::max<std::int64_t>(2, w.numel() / 1000)) {
      stats.branch_flips += bad;
      continue;
    }
    if (bad > 0) {
      char buf[320];
      std::snprintf(buf, sizeof buf, "%s: %lld of %lld elements off; first at %lld: got %.9g, want %.9g (double %.9g, "
                    "reference error scale %.3g)",
                    o.name.c_str(), static_cast<long long>(bad), static_cast<long long>(w.numel()),
                    static_cast<long long>(first), double(x.get(first)), double(w.get(first)),
                    d[static_cast<std::size_t>(first)], scale);
      return buf;
    }
  }
  return "";
}

std::string differing_bits(const KernelSpec& spec, const TensorMap& a, const TensorMap& b) {
  for (const Output& o : spec.graph.outputs()) {
    const HostTensor& x = a.at(o.name);
    const HostTensor& y = b.at(o.name);
    if (x.dtype != y.dtype || x.shape != y.shape) return o.name + ": dtype or shape differs";
    if (x.bytes != y.bytes) {
      for (std::int64_t i = 0; i < x.numel(); ++i)
        if (std::memcmp(x.bytes.data() + i * size_of(x.dtype), y.bytes.data() + i * size_of(x.dtype),
                        size_of(x.dtype)) != 0) {
          char buf[200];
          std::snprintf(buf, sizeof buf, "%s: element %lld is %.9g and %.9g", o.name.c_str(),
                        static_cast<long long>(i), double(x.get(i)), double(y.get(i)));
          return buf;
        }
    }
  }
  return "";
}

struct Runner {
  Jit* jit = nullptr;  // null: --dry-run
  std::string target;
  std::filesystem::path out;
  bool print = false;  // --print: each case as one JSON line on stdout
  Stats stats;
  std::int64_t failures_written = 0;

  void fail(const Case& c, std::uint64_t case_seed, const std::string& check, const std::string& message) {
    ++stats.failed;
    Json j = case_json(c, case_seed);
    j["check"] = check;
    j["message"] = message;
    const std::filesystem::path p =
        out / ("fail-" + std::to_string(::getpid()) + "-" + std::to_string(failures_written++) + ".json");
    write_json(p, j);
    std::fprintf(stderr, "gpu_fuzz: FAILED %s (%s, %s, tile %s): %s\n  repro: %s\n", check.c_str(), c.what.c_str(),
                 c.spec.name.c_str(), c.tile ? to_string(*c.tile).c_str() : "default", message.c_str(),
                 p.string().c_str());
  }

  void count(const Case& c) {
    ++stats.run;
    ++stats.by_what[c.what];
    stats.strided += strided(c.shape);
    stats.batched += c.shape.batch > 1;
    stats.tiled += c.tile.has_value();
    stats.misaligned += c.misalign > 0;
  }

  // Runs one case; returns the outputs (for a backward's saved state), or
  // nullopt when the code generator or the device does not take it.
  std::optional<TensorMap> run(const Case& c, std::uint64_t case_seed) {
    TensorMap inputs;
    try {
      verify_shape(c.spec, c.shape);
      inputs = make_inputs(c.spec, c.shape, c.data_seed, c.given);
    } catch (const UserError&) {
      ++stats.rejected;
      return std::nullopt;
    }
    if (print) std::printf("%s\n", case_json(c, case_seed).dump().c_str());
    if (!jit) {  // dry: emit, and evaluate the smallest
      try {
        emit_kernel(c.spec, c.shape, c.tile, KernelPath::fastest, target);
      } catch (const UserError& e) {
        ++stats.unsupported;
        ++stats.unsupported_why[std::string(e.what()).substr(0, 60)];
        return std::nullopt;
      }
      count(c);
      if (c.shape.m * c.shape.n * std::max<std::int64_t>(1, c.shape.k) <= (1 << 16))
        return evaluate(c.spec, c.shape, inputs, c.args);
      return TensorMap{};
    }
    write_json(out / ("current-" + std::to_string(::getpid()) + ".json"), case_json(c, case_seed));
    TensorMap got;
    std::optional<TileConfig> resolved;
    try {
      resolved = jit->compile(c.spec, c.shape, c.tile)->key().tile;
      got = run_on_device(*jit, c.spec, c.shape, inputs, c.args, c.tile, c.misalign);
    } catch (const UserError& e) {
      ++stats.unsupported;
      ++stats.unsupported_why[std::string(e.what()).substr(0, 60)];
      return std::nullopt;
    } catch (const std::exception& e) {
      fail(c, case_seed, "launch", e.what());
      return std::nullopt;
    }
    count(c);
    try {
      if (std::string m = check_reference(c, inputs, got, stats); !m.empty()) fail(c, case_seed, "reference", m);
      const TensorMap again = run_on_device(*jit, c.spec, c.shape, inputs, c.args, c.tile, c.misalign);
      if (std::string m = differing_bits(c.spec, got, again); !m.empty()) fail(c, case_seed, "repeat", m);
      if (strided(c.shape)) {
        const TensorMap dense = run_on_device(*jit, c.spec, dense_of(c.shape), inputs, c.args, resolved, c.misalign);
        if (std::string m = differing_bits(c.spec, got, dense); !m.empty()) {
          // An ld the fast kernel cannot read (a TMA stride off 16 bytes, a
          // vector off its row) takes the general kernel, as a misaligned
          // pointer does: the dense copy's bits on that kernel.
          const TensorMap general = run_on_device(*jit, c.spec, dense_of(c.shape), inputs, c.args, resolved, 1);
          if (differing_bits(c.spec, got, general).empty())
            ++stats.general_path;
          else
            fail(c, case_seed, "strided", m + " (dense on tile " + to_string(*resolved) + ", and on its general kernel)");
        }
      }
    } catch (const std::exception& e) {
      fail(c, case_seed, "check", e.what());
    }
    return got;
  }

  std::optional<TileConfig> random_tile(Rng& rng, const KernelSpec& spec, const Shape& shape) {
    if (rng.chance(0.5)) return std::nullopt;
    try {
      const std::vector<TileConfig> tiles =
          jit ? jit->tile_candidates(spec, shape) : tile_candidates(spec, shape, target);
      if (tiles.empty()) return std::nullopt;
      return rng.pick(tiles);
    } catch (const UserError&) {
      return std::nullopt;
    }
  }

  // One drawn chain and what follows from it.
  void one(std::uint64_t case_seed) {
    Rng rng{case_seed};
    ++stats.drawn;
    Case c;
    c.what = "forward";
    try {
      c.spec = random_spec(rng, case_seed);
      verify(c.spec);
    } catch (const UserError&) {
      ++stats.rejected;
      return;
    }
    c.shape = random_shape(rng, c.spec);
    if (c.spec.mainloop.kind != MainloopKind::elementwise && !has_col_sum(c.spec) && rng.chance(0.15)) {
      c.shape.batch = rng.in(2, 4);
      if (rng.chance(0.35)) c.shape.batch_stride_b = 0;  // one B for every batch (a shared weight)
      while (c.shape.batch * c.shape.m * c.shape.n * c.shape.k > (1ll << 26) && c.shape.m > 1) c.shape.m /= 2;
    }
    if (rng.chance(0.25)) random_strides(rng, c.spec, c.shape);
    c.tile = random_tile(rng, c.spec, c.shape);
    c.args.seed = rng.next();
    c.args.offset = rng.chance(0.5) ? 0 : rng.next() >> 20;
    c.data_seed = rng.next();
    c.misalign = rng.chance(0.1) ? 1 : 0;  // a pointer off its vector: the general kernel
    run(c, case_seed);

    // The backward, where grad() differentiates the chain (unbatched, dense).
    if (c.shape.batch > 1 || !rng.chance(0.5)) return;
    GradResult r;
    try {
      r = grad(c.spec);
    } catch (const UserError&) {
      return;
    }
    Case f = c;
    f.what = "grad forward";
    f.spec = r.forward;
    f.shape = dense_of(c.shape);
    f.tile = random_tile(rng, f.spec, f.shape);
    const std::optional<TensorMap> saved = run(f, case_seed);
    if (!saved) return;
    Case bwd = c;
    bwd.what = "backward";
    bwd.spec = r.backward;
    bwd.shape = {c.shape.m, c.shape.n, 0};
    if (rng.chance(0.2)) random_strides(rng, bwd.spec, bwd.shape);
    bwd.tile = random_tile(rng, bwd.spec, bwd.shape);
    bwd.data_seed = rng.next();
    // The saved state a forward wrote, so the backward reads values a forward
    // could have made (rstd > 0, a softmax's sums): half the time the GPU
    // forward's, as in training (what the backward recomputes must agree with
    // what another kernel saved), else the reference's. Every saved tensor, the
    // forward's own outputs read back included: a log_softmax's output drawn at
    // random would make exp(h) no softmax and the backward's row sums as
    // ill-conditioned as the checker's bounds.
    const TensorMap fwd_inputs = make_inputs(f.spec, f.shape, f.data_seed, f.given);
    const bool from_device = rng.chance(0.5) && jit;  // the draw first: a dry run draws the same cases
    const TensorMap fwd = from_device ? *saved : evaluate(f.spec, f.shape, fwd_inputs, f.args);
    for (const SavedTensor& s : r.saved)
      if (auto it = fwd.find(s.name); it != fwd.end()) bwd.given.emplace(s.name, it->second);
    for (const auto& [name, t] : fwd_inputs) bwd.given.emplace(name, t);  // the inputs it reads again
    bwd.given = inputs_of(bwd.spec, std::move(bwd.given));
    run(bwd, case_seed);

    // A single GEMM's backward as the dgrad epilogue of dy's GEMM.
    if (c.spec.mainloop.kind != MainloopKind::gemm || c.spec.graph.outputs().size() != 1) return;
    Case dg = bwd;
    dg.what = "dgrad";
    try {
      Mainloop m = c.spec.mainloop;
      m.a_layout = Layout::row;
      m.b_layout = rng.chance(0.5) ? Layout::row : Layout::col;
      dg.spec = as_gemm_epilogue(r.backward, "dy", m);
      verify(dg.spec);
    } catch (const UserError&) {
      return;
    }
    dg.given = inputs_of(dg.spec, bwd.given);
    dg.shape = {c.shape.m, c.shape.n, rng.chance(0.5) ? c.shape.k : std::max<std::int64_t>(1, c.shape.k / 2 + 3)};
    dg.tile = random_tile(rng, dg.spec, dg.shape);
    run(dg, case_seed);
  }
};

int usage() {
  std::fprintf(stderr,
               "usage: epifuse_gpu_fuzz [--seed S] [--cases N] [--seconds T] [--out DIR] [--dry-run [--target T]] [--print] [--case CASE_SEED]\n"
               "  random chains on the GPU against the CPU reference (docs/fuzzing.md, \"On a GPU\");\n"
               "  defaults: seed 1, 100 cases, no time limit, out gpu-fuzz-out, target sm_90a for --dry-run\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t seed = 1;
  std::int64_t cases = 100;
  double seconds = 0;
  bool dry = false, print = false;
  std::optional<std::uint64_t> one_case;
  std::string target = "sm_90a", out = "gpu-fuzz-out";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "epifuse_gpu_fuzz: %s needs a value\n", a.c_str());
        std::exit(usage());
      }
      return argv[++i];
    };
    try {
      if (a == "--seed") seed = std::stoull(value());
      else if (a == "--cases") cases = std::stoll(value());
      else if (a == "--seconds") seconds = std::stod(value());
      else if (a == "--out") out = value();
      else if (a == "--target") target = value();
      else if (a == "--dry-run") dry = true;
      else if (a == "--print") print = true;
      else if (a == "--case") one_case = std::stoull(value());
      else if (a == "--help" || a == "-h") return usage(), 0;
      else {
        std::fprintf(stderr, "epifuse_gpu_fuzz: unknown option %s\n", a.c_str());
        return usage();
      }
    } catch (const std::logic_error&) {
      std::fprintf(stderr, "epifuse_gpu_fuzz: %s takes a number\n", a.c_str());
      return usage();
    }
  }
  if (cases <= 0 && seconds <= 0) {
    std::fprintf(stderr, "epifuse_gpu_fuzz: give a positive --cases or --seconds\n");
    return usage();
  }
  Runner runner;
  runner.out = out;
  runner.target = target;
  runner.print = print;
  std::filesystem::create_directories(runner.out);
  std::unique_ptr<Jit> jit;
  if (!dry) {
    if (const std::string why = gpu_unavailable_reason(); !why.empty()) {
      std::fprintf(stderr, "epifuse_gpu_fuzz: no GPU (%s); --dry-run runs without one\n", why.c_str());
      return 77;
    }
    jit = std::make_unique<Jit>();
    runner.jit = jit.get();
    runner.target = jit->target();
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  double last_report = 0;
  if (one_case) cases = 1;
  for (std::int64_t i = 0; (cases <= 0 || i < cases) && (seconds <= 0 || elapsed() < seconds); ++i) {
    runner.one(one_case ? *one_case : seed * 0x100000001b3ull + static_cast<std::uint64_t>(i));
    if (elapsed() - last_report >= 30) {
      last_report = elapsed();
      std::fprintf(stderr, "gpu_fuzz: %.0f s, %lld chains, %lld kernels run, %lld failed\n", elapsed(),
                   static_cast<long long>(runner.stats.drawn), static_cast<long long>(runner.stats.run),
                   static_cast<long long>(runner.stats.failed));
    }
  }
  std::filesystem::remove(runner.out / ("current-" + std::to_string(::getpid()) + ".json"));
  const Stats& s = runner.stats;
  std::printf("gpu_fuzz: seed %llu, %s, %.0f s: %lld chains drawn, %lld kernels run (%lld on a tuner's tile, %lld strided, "
              "%lld batched, %lld misaligned), %lld rejected, %lld unsupported, %lld elements explained by conditioning, %lld by a branch, "
              "%lld strided cases on the general kernel, %lld failed\n",
              static_cast<unsigned long long>(seed), dry ? ("dry run for " + target).c_str() : runner.target.c_str(),
              elapsed(), static_cast<long long>(s.drawn), static_cast<long long>(s.run),
              static_cast<long long>(s.tiled), static_cast<long long>(s.strided), static_cast<long long>(s.batched),
              static_cast<long long>(s.misaligned),
              static_cast<long long>(s.rejected), static_cast<long long>(s.unsupported),
              static_cast<long long>(s.explained), static_cast<long long>(s.branch_flips),
              static_cast<long long>(s.general_path), static_cast<long long>(s.failed));
  for (const auto& [what, n] : s.by_what) std::printf("  run  %-14s %lld\n", what.c_str(), static_cast<long long>(n));
  for (const auto& [why, n] : s.unsupported_why)
    std::printf("  unsupported %5lld  %s\n", static_cast<long long>(n), why.c_str());
  return s.failed ? 1 : 0;
}
