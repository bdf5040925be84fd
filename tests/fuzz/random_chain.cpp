// The generator of tests/fuzz/gpu_fuzz.cpp (random_chain.hpp).
#include "random_chain.hpp"

#include <algorithm>
#include <string>

#include "epifuse/graph.hpp"

namespace epifuse::fuzz {

namespace {

// The generator. It draws ops whose results stay well conditioned on the
// reference's random data (uniform in about [-1, 1]): the log, rsqrt and div of
// arbitrary values are left to the composites that guard them (softmax,
// log_softmax, the norms), and row sums take values of one sign, so a
// tolerance failure means the kernel, not cancellation.

const std::vector<DType> k_io = {DType::f32, DType::f16, DType::bf16};

struct Builder {
  Rng& rng;
  KernelSpec spec;
  DType io = DType::f32;
  int inputs = 0;
  std::vector<Value> full;  // full [M,N] values made so far (operands for binaries, extra outputs)
  bool rows = false;        // a row reduction was made

  Value fresh_input(Broadcast b) {
    const DType dt = rng.chance(0.8) ? io : rng.pick(k_io);
    return spec.graph.input("in" + std::to_string(inputs++), dt, b);
  }

  Value activation(Value v) {
    static const std::vector<OpKind> ops = {OpKind::relu, OpKind::gelu_tanh, OpKind::gelu_erf,
                                            OpKind::sigmoid, OpKind::silu, OpKind::tanh};
    return spec.graph.unary(rng.pick(ops), v);
  }

  Value binary(Value v) {
    static const std::vector<OpKind> ops = {OpKind::add, OpKind::mul, OpKind::sub, OpKind::max, OpKind::min};
    const OpKind op = rng.pick(ops);
    Value other;
    if (!full.empty() && rng.chance(0.25)) {
      other = rng.pick(full);
    } else {
      static const std::vector<Broadcast> bs = {Broadcast::full, Broadcast::row, Broadcast::row,
                                                Broadcast::col, Broadcast::scalar};
      other = fresh_input(rng.pick(bs));
    }
    return rng.chance(0.5) ? spec.graph.binary(op, v, other) : spec.graph.binary(op, other, v);
  }

  // A row reduction's result combined with the row, or a composite.
  Value row_op(Value v) {
    rows = true;
    Graph& g = spec.graph;
    switch (rng.below(7)) {
      case 0: return g.softmax(v);
      case 1: return g.log_softmax(v);
      case 2: return g.rmsnorm(v, fresh_input(Broadcast::row), rng.pick(std::vector<double>{1e-6, 1e-5, 0.1}));
      case 3: return g.layernorm(v, fresh_input(Broadcast::row), fresh_input(Broadcast::row), 1e-5);
      case 4: return g.sub(v, g.row_max(v));
      case 5: return g.mul(v, g.row_mean(g.sigmoid(v)));  // a row sum of positive values
      default: return g.add(v, g.row_sum(g.mul(v, v)));
    }
  }

  // exp, log, rsqrt and div where they stay well conditioned: of bounded or
  // positive values (x*x + 1/2).
  Value guarded(Value v) {
    Graph& g = spec.graph;
    auto positive = [&](Value a) { return g.add_scalar(g.mul(a, a), 0.5); };
    switch (rng.below(4)) {
      case 0: return g.exp(g.tanh(v));
      case 1: return g.log(positive(v));
      case 2: return g.rsqrt(positive(v));
      default: {
        static const std::vector<Broadcast> bs = {Broadcast::full, Broadcast::row, Broadcast::col};
        return g.div(v, positive(fresh_input(rng.pick(bs))));
      }
    }
  }

  Value step(Value v, bool allow_rows) {
    Graph& g = spec.graph;
    const std::int64_t r = rng.below(100);
    if (r < 22) return activation(v);
    if (r < 50) return binary(v);
    if (r < 56) return g.scale(v, rng.uniform(-2.0, 2.0));
    if (r < 60) return g.add_scalar(v, rng.uniform(-1.0, 1.0));
    if (r < 72) {
      static const std::vector<double> ps = {0.0, 0.1, 0.1, 0.25, 0.5, 0.9, 1.0};
      return g.dropout(v, rng.pick(ps), rng.chance(0.85) ? RngMode::philox4 : RngMode::triton);
    }
    if (r < 78) return g.cast(v, rng.chance(0.5) ? DType::bf16 : DType::f16);
    if (r < 84) return guarded(v);
    if (allow_rows && r < 96) return row_op(v);
    return activation(v);
  }
};

}  // namespace

KernelSpec random_spec(Rng& rng, std::uint64_t id) {
  Builder b{rng, {}, rng.pick(k_io)};
  KernelSpec& spec = b.spec;
  spec.name = "fuzz" + std::to_string(id);
  spec.precision = rng.chance(0.25) ? Precision::fast : Precision::accurate;
  const std::int64_t kind = rng.below(100);
  Graph& g = spec.graph;
  Value v;
  if (kind < 50) {
    spec.mainloop.kind = MainloopKind::elementwise;
    v = g.input("x", b.io, Broadcast::full);
  } else {
    spec.mainloop.kind = kind < 88 ? MainloopKind::gemm : MainloopKind::dual_gemm;
    const std::int64_t t = rng.below(10);
    const DType op = t < 4 ? DType::f16 : t < 8 ? DType::bf16 : DType::f32;
    spec.mainloop.a = spec.mainloop.b = op;
    spec.mainloop.math = op == DType::f32 && rng.chance(0.7) ? GemmMath::tf32 : GemmMath::exact;
    spec.mainloop.a_layout = rng.chance(0.8) ? Layout::row : Layout::col;
    spec.mainloop.b_layout = rng.chance(0.5) ? Layout::row : Layout::col;
    if (op != DType::f32) b.io = rng.chance(0.85) ? op : DType::f32;
    v = g.accumulator(0);
  }
  b.full.push_back(v);
  const bool allow_rows = spec.mainloop.kind == MainloopKind::elementwise;
  const std::int64_t steps = rng.in(1, 6);
  for (std::int64_t i = 0; i < steps; ++i) {
    if (spec.mainloop.kind == MainloopKind::dual_gemm && i == 0) {  // the gate: act(acc0) * acc1, or the other way
      Value a1 = g.accumulator(1);
      if (rng.chance(0.3)) {  // each accumulator with a bias of its own (gating)
        v = g.add(v, b.fresh_input(Broadcast::row));
        a1 = g.add(a1, b.fresh_input(Broadcast::row));
      }
      v = rng.chance(0.8) ? g.mul(b.activation(v), a1) : g.mul(v, b.activation(a1));
    } else {
      v = b.step(v, allow_rows);
    }
    if (g.node(v).broadcast == Broadcast::full) b.full.push_back(v);
  }
  if (spec.mainloop.kind == MainloopKind::dual_gemm && g.nodes().size() < 4) v = g.mul(v, g.accumulator(1));
  g.output("y", v, b.io);
  if (b.full.size() > 2 && rng.chance(0.3)) {  // an intermediate as a second output
    const Value extra = b.full[static_cast<std::size_t>(rng.in(1, static_cast<std::int64_t>(b.full.size()) - 2))];
    g.output("h", extra, rng.chance(0.5) ? b.io : DType::f32);
  }
  if (rng.chance(0.2)) g.output("cs", g.col_sum(rng.pick(b.full)), rng.chance(0.6) ? DType::f32 : b.io);
  return spec;
}

// The tensors of `given` that `spec` binds as inputs.
TensorMap inputs_of(const KernelSpec& spec, TensorMap given) {
  TensorMap kept;
  for (const Node& n : spec.graph.nodes())
    if (n.kind == NodeKind::input)
      if (auto it = given.find(n.name); it != given.end()) kept.emplace(n.name, std::move(it->second));
  return kept;
}

// Ops whose value jumps where their argument crosses a point (max and min's
// derivative, ReLU's): the device and the reference may land on either side
// of it, so a few elements of a gradient may differ by a whole term.
bool has_branches(const KernelSpec& spec) {
  for (const Node& n : spec.graph.nodes())
    if (n.kind == NodeKind::op && (n.op == OpKind::step || n.op == OpKind::relu_deriv)) return true;
  return false;
}

bool has_row_reduction(const KernelSpec& spec) {
  for (const Node& n : spec.graph.nodes())
    if (n.kind == NodeKind::op && (n.op == OpKind::row_max || n.op == OpKind::row_sum || n.op == OpKind::row_mean))
      return true;
  return false;
}

bool has_col_sum(const KernelSpec& spec) {
  for (const Output& o : spec.graph.outputs())
    if (spec.graph.node(o.value).kind == NodeKind::op && spec.graph.node(o.value).op == OpKind::col_sum) return true;
  return false;
}

// M, N (and K): ragged and round, few rows and many, long rows for row chains.
// The reference runs on one core, so M*N*K stays under 2^26 and M*N under 2^22.
Shape random_shape(Rng& rng, const KernelSpec& spec) {
  auto dim = [&](std::int64_t lo, std::int64_t hi) {
    const std::int64_t d = rng.in(lo, hi);
    const std::int64_t r = rng.below(3);
    if (r == 0) return std::max<std::int64_t>(lo, d / 64 * 64);  // a whole number of tiles
    if (r == 1) return std::max<std::int64_t>(lo, d / 8 * 8);
    return d;
  };
  Shape s;
  const bool gemm = spec.mainloop.kind != MainloopKind::elementwise;
  if (!gemm && has_row_reduction(spec) && rng.chance(0.3)) {
    s.n = dim(4096, 70000);
    s.m = dim(1, std::max<std::int64_t>(1, (1 << 21) / s.n));
  } else {
    s.m = rng.chance(0.2) ? dim(1, 64) : dim(1, 2048);
    s.n = rng.chance(0.15) ? dim(1, 64) : dim(1, 4096);
  }
  if (gemm) {
    s.k = rng.chance(0.1) ? dim(1, 32) : dim(1, 1024);
    while (s.m * s.n * s.k > (1ll << 26) && s.k > 1) s.k /= 2;
  }
  while (s.m * s.n > (1ll << 22)) s.m = std::max<std::int64_t>(1, s.m / 2);
  return s;
}

// Strided tensors (about one case in four): each full input and output, and
// a GEMM's operands, a pad of its own from a few elements to a few rows' worth.
void random_strides(Rng& rng, const KernelSpec& spec, Shape& s) {
  static const std::vector<std::int64_t> pads = {1, 2, 7, 8, 16, 64, 129};
  if (s.batch > 1) return;
  const Graph& g = spec.graph;
  std::size_t i = 0;
  for (const Node& n : g.nodes()) {
    if (n.kind != NodeKind::input) continue;
    s.ld_inputs.push_back(n.broadcast == Broadcast::full && rng.chance(0.5) ? s.n + rng.pick(pads) : 0);
    ++i;
  }
  for (const Output& o : g.outputs()) {
    const Node& n = g.node(o.value);
    const bool column_sum = n.kind == NodeKind::op && n.op == OpKind::col_sum;
    s.ld_outputs.push_back(!column_sum && n.broadcast == Broadcast::full && rng.chance(0.5) ? s.n + rng.pick(pads) : 0);
  }
  if (spec.mainloop.kind != MainloopKind::elementwise) {
    if (rng.chance(0.5)) s.lda = gemm_operand_extent(spec.mainloop, s, 0) + rng.pick(pads);
    if (rng.chance(0.5)) s.ldb = gemm_operand_extent(spec.mainloop, s, 1) + rng.pick(pads);
    if (spec.mainloop.kind == MainloopKind::dual_gemm && rng.chance(0.5))
      s.ldb1 = gemm_operand_extent(spec.mainloop, s, 2) + rng.pick(pads);
  }
}

bool strided(const Shape& s) {
  auto any = [](const std::vector<std::int64_t>& v) {
    return std::any_of(v.begin(), v.end(), [](std::int64_t x) { return x != 0; });
  };
  return s.lda || s.ldb || s.ldb1 || any(s.ld_inputs) || any(s.ld_outputs);
}

Shape dense_of(Shape s) {
  s.lda = s.ldb = s.ldb1 = 0;
  s.ld_inputs.clear();
  s.ld_outputs.clear();
  return s;
}

}  // namespace epifuse::fuzz
