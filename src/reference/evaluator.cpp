// The reference evaluator (docs/design.md §1): the executable spec every kernel is
// checked against. The graph is resolved once into an index-based program
// (one Instr per node, operands as register numbers, inputs as pre-converted
// float arrays), then run per output element; no lookups or allocations
// happen inside the element loop.
#include <cstring>
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/philox.cuh"
#include "common/tf32.cuh"
#include "epifuse/errors.hpp"
#include "epifuse/reference.hpp"
#include "ir/names.hpp"
#include "ir/op_table.hpp"
#include "reference/ops.hpp"
#include "reference/philox.hpp"

namespace epifuse {

namespace {

std::int64_t shape_numel(const std::vector<std::int64_t>& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::int64_t shape_numel(Broadcast b, const Shape& shape) { return shape_numel(operand_shape(b, shape)); }

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += fmt::format("{}{}", i ? "," : "", s[i]);
  return out + "]";
}

// What a required operand is, for error messages.
std::string role(const KernelSpec& spec, const std::string& name) {
  if (spec.mainloop.kind != MainloopKind::elementwise) {
    if (name == names::k_gemm_operands[0]) return "GEMM operand A [M,K]";
    if (names::is_gemm_operand_name(name)) return "GEMM operand B [K,N]";
  }
  switch (spec.graph.node(spec.graph.find(name)).broadcast) {
    case Broadcast::full: return "full [M,N]";
    case Broadcast::row: return "row vector of N";
    case Broadcast::col: return "column vector of M";
    case Broadcast::scalar: return "scalar";
  }
  return "?";
}

void check_required(const KernelSpec& spec, const std::vector<OperandDesc>& required,
                    const TensorMap& inputs) {
  std::string names;
  for (const auto& d : required) names += (names.empty() ? "" : ", ") + d.name;
  for (const auto& [name, t] : inputs) {
    // `&name = name`: clang before 16 cannot capture a structured binding.
    const bool known = std::any_of(required.begin(), required.end(),
                                   [&name = name](const OperandDesc& d) { return d.name == name; });
    EPIFUSE_CHECK(known, "unknown input '{}': this kernel takes {}", name,
                  names.empty() ? "no inputs" : names);
  }
  for (const auto& d : required) {
    auto it = inputs.find(d.name);
    EPIFUSE_CHECK(it != inputs.end(), "missing input '{}': expected {} {} ({})", d.name,
                  to_string(d.dtype), shape_str(d.shape), role(spec, d.name));
    const HostTensor& t = it->second;
    EPIFUSE_CHECK(t.dtype == d.dtype, "input '{}': expected dtype {}, got {}", d.name,
                  to_string(d.dtype), to_string(t.dtype));
    EPIFUSE_CHECK(t.shape == d.shape, "input '{}': expected shape {} ({}), got {}", d.name,
                  shape_str(d.shape), role(spec, d.name), shape_str(t.shape));
    EPIFUSE_CHECK(t.bytes.size() == static_cast<std::size_t>(t.numel()) * size_of(t.dtype),
                  "input '{}': holds {} bytes, but {} {} needs {}", d.name, t.bytes.size(),
                  to_string(t.dtype), shape_str(t.shape), t.numel() * size_of(t.dtype));
  }
}

std::vector<float> to_floats(const HostTensor& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = t.get(static_cast<std::int64_t>(i));
  return out;
}

// f32 rounded to tf32 as the kernels round their operands: the same function
// (common/tf32.cuh; 10 mantissa bits, to nearest, ties to even, as the copy
// engine and cuBLAS round). Inf and NaN stay as they are.
float round_to_tf32(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  u = ef_round_tf32_bits(u);
  std::memcpy(&x, &u, 4);
  return x;
}

// A GEMM operand as the mainloop reads it.
std::vector<float> operand(const HostTensor& t, const Mainloop& ml) {
  std::vector<float> v = to_floats(t);
  if (ml.math == GemmMath::tf32)
    for (float& x : v) x = round_to_tf32(x);
  return v;
}

// acc[r,c] = sum_k a[r,k] * b[k,c]: every product is exact in double and the
// sum runs over k in order in double, rounded to fp32 once. Loop order r, k, c
// streams rows of b.
std::vector<float> gemm(const std::vector<float>& a, const std::vector<float>& b,
                        const Shape& s) {
  const auto m = static_cast<std::size_t>(s.m), n = static_cast<std::size_t>(s.n),
             k = static_cast<std::size_t>(s.k);
  std::vector<float> acc(m * n);
  std::vector<double> row(n);
  for (std::size_t r = 0; r < m; ++r) {
    std::fill(row.begin(), row.end(), 0.0);
    for (std::size_t kk = 0; kk < k; ++kk) {
      const double av = a[r * k + kk];
      const float* brow = b.data() + kk * n;
      for (std::size_t c = 0; c < n; ++c) row[c] += av * static_cast<double>(brow[c]);
    }
    for (std::size_t c = 0; c < n; ++c) acc[r * n + c] = static_cast<float>(row[c]);
  }
  return acc;
}

// How a leaf is indexed from (r, c).
enum class Index : std::uint8_t { full, row, col, scalar };

Index index_of(Broadcast b) {
  switch (b) {
    case Broadcast::full: return Index::full;
    case Broadcast::row: return Index::row;
    case Broadcast::col: return Index::col;
    case Broadcast::scalar: return Index::scalar;
  }
  return Index::full;
}

// One node of the resolved program; registers are node indices. T is float
// (the spec's fp32 semantics) or double (evaluate_double).
template <class T>
struct Instr {
  NodeKind kind = NodeKind::op;
  OpKind op = OpKind::add;
  std::uint32_t a = 0, b = 0;       // operand registers
  const T* data = nullptr;          // leaves
  Index index = Index::full;        // leaves
  DType dtype = DType::f32;         // cast
  float alpha = 1.0f;               // scale: the fp32 runtime scalar; add_scalar: c as the code's float literal
  RngMode rng = RngMode::philox4;   // dropout
  std::uint32_t stream = 0;         // dropout
  std::uint32_t thr = 0;            // dropout, philox4
  float p = 0.0f;                   // dropout, triton
  float scale = 1.0f;               // dropout
  std::int64_t n = 1;               // div_n: the row length
  int level = 0;                    // col_sums on its path from the leaves (Note [Passes over the rows])
};

bool dropout_keeps(const Instr<float>& in, std::uint64_t i, const LaunchArgs& args);

// One op at one element: x and y its operands' values there.
float run_op(const Instr<float>& in, float x, float y, std::uint64_t i, const LaunchArgs& args) {
  switch (in.op) {
    case OpKind::add: return ref_ops::add(x, y);
    case OpKind::sub: return ref_ops::sub(x, y);
    case OpKind::mul: return ref_ops::mul(x, y);
    case OpKind::max: return ref_ops::max(x, y);
    case OpKind::min: return ref_ops::min(x, y);
    case OpKind::scale: return ref_ops::mul(in.alpha, x);
    case OpKind::add_scalar: return ref_ops::add(x, in.alpha);
    case OpKind::relu: return ref_ops::relu(x);
    case OpKind::gelu_tanh: return ref_ops::gelu_tanh(x);
    case OpKind::gelu_erf: return ref_ops::gelu_erf(x);
    case OpKind::sigmoid: return ref_ops::sigmoid(x);
    case OpKind::silu: return ref_ops::silu(x);
    case OpKind::tanh: return ref_ops::tanh(x);
    case OpKind::div: return ref_ops::div(x, y);
    case OpKind::exp: return ref_ops::exp(x);
    case OpKind::log: return ref_ops::log(x);
    case OpKind::rsqrt: return ref_ops::rsqrt(x);
    case OpKind::cast: return round_to(in.dtype, x);
    case OpKind::step: return ref_ops::step(x);
    case OpKind::relu_deriv: return ref_ops::relu_deriv(x);
    case OpKind::gelu_tanh_deriv: return ref_ops::gelu_tanh_deriv(x);
    case OpKind::gelu_erf_deriv: return ref_ops::gelu_erf_deriv(x);
    case OpKind::sigmoid_deriv: return ref_ops::sigmoid_deriv(x);
    case OpKind::silu_deriv: return ref_ops::silu_deriv(x);
    case OpKind::tanh_deriv: return ref_ops::tanh_deriv(x);
    case OpKind::expand: return x;
    case OpKind::div_n: return static_cast<float>(double{x} / static_cast<double>(in.n));
    case OpKind::row_max:
    case OpKind::row_sum:
    case OpKind::row_mean:
    case OpKind::col_sum: break;  // whole-row and whole-column ops: run_program
    case OpKind::dropout:
      // x * mask * scale as PyTorch computes it: a dropped NaN or inf is NaN.
      return x * (dropout_keeps(in, i, args) ? in.scale : 0.0f);  // the fp32 multiply of docs/design.md §4
  }
  EPIFUSE_ASSERT(false, "unhandled op {}", static_cast<int>(in.op));
  return 0.0f;
}

// The same ops in double, with no rounding anywhere: a cast is the identity
// (its derivative is 1, as a dtype conversion's is in PyTorch), a dropout
// keeps the same elements and multiplies by the same scale. The constants
// (alpha, c, the dropout scale) are the fp32 values the kernels use, so the
// function differentiated is the kernels' function.
double run_op(const Instr<double>& in, double x, double y, std::uint64_t i, const LaunchArgs& args) {
  switch (in.op) {
    case OpKind::add: return x + y;
    case OpKind::sub: return x - y;
    case OpKind::mul: return x * y;
    case OpKind::max: return std::isnan(x) || std::isnan(y) ? x + y : (x == y ? (std::signbit(x) ? y : x) : std::max(x, y));
    case OpKind::min: return std::isnan(x) || std::isnan(y) ? x + y : (x == y ? (std::signbit(x) ? x : y) : std::min(x, y));
    case OpKind::scale: return double{in.alpha} * x;
    case OpKind::add_scalar: return x + double{in.alpha};
    case OpKind::relu: return std::isnan(x) ? x : (x > 0 ? x : 0.0);
    case OpKind::gelu_tanh: return ref_ops::gelu_tanh_d(x);
    case OpKind::gelu_erf: return ref_ops::gelu_erf_d(x);
    case OpKind::sigmoid: return ref_ops::sigmoid_d(x);
    case OpKind::silu: return ref_ops::silu_d(x);
    case OpKind::tanh: return std::tanh(x);
    case OpKind::div: return x / y;
    case OpKind::exp: return std::exp(x);
    case OpKind::log: return std::log(x);
    case OpKind::rsqrt: return 1.0 / std::sqrt(x);
    case OpKind::cast: return x;
    case OpKind::step: return ref_ops::step_d(x);
    case OpKind::relu_deriv: return ref_ops::relu_deriv_d(x);
    case OpKind::gelu_tanh_deriv: return ref_ops::gelu_tanh_deriv_d(x);
    case OpKind::gelu_erf_deriv: return ref_ops::gelu_erf_deriv_d(x);
    case OpKind::sigmoid_deriv: return ref_ops::sigmoid_deriv_d(x);
    case OpKind::silu_deriv: return ref_ops::silu_deriv_d(x);
    case OpKind::tanh_deriv: return ref_ops::tanh_deriv_d(x);
    case OpKind::expand: return x;
    case OpKind::div_n: return x / static_cast<double>(in.n);
    case OpKind::row_max:
    case OpKind::row_sum:
    case OpKind::row_mean:
    case OpKind::col_sum: break;
    case OpKind::dropout: {
      Instr<float> f;
      f.rng = in.rng;
      f.stream = in.stream;
      f.thr = in.thr;
      f.p = in.p;
      return x * (dropout_keeps(f, i, args) ? double{in.scale} : 0.0);
    }
  }
  EPIFUSE_ASSERT(false, "unhandled op {}", static_cast<int>(in.op));
  return 0.0;
}

bool dropout_keeps(const Instr<float>& in, std::uint64_t i, const LaunchArgs& args) {
  return in.rng == RngMode::triton ? ef_triton_keep(ef_triton_draw(args.seed, args.offset, i), in.p)
                                   : ef_dropout_keep(ef_philox4_draw(args.seed, args.offset, in.stream, i), in.thr);
}

// A reduction over one row of its operand, in column order: max with NaN
// propagating (the first NaN), sum and mean in double, rounded to T once.
template <class T>
T row_reduce(OpKind op, const T* a, std::int64_t n) {
  if (op == OpKind::row_max) {
    // ref_ops::max's rules: the first NaN wins, +0 beats -0.
    T m = -std::numeric_limits<T>::infinity();
    for (std::int64_t c = 0; c < n && !std::isnan(m); ++c)
      m = std::isnan(a[c]) || a[c] > m || (a[c] == m && !std::signbit(a[c])) ? a[c] : m;
    return m;
  }
  double sum = 0.0;
  for (std::int64_t c = 0; c < n; ++c) sum += a[c];
  return static_cast<T>(op == OpKind::row_mean ? sum / static_cast<double>(n) : sum);
}

// Note [Passes over the rows]
// The evaluator runs row by row, each instruction over the row's columns in
// program order, so a row reduction finds its operand's whole row computed
// (a reduction is one value, kept in every column of its register). A
// col_sum needs every row of its operand first. An op's level is the number
// of col_sums on its longest path from the leaves; pass L computes every op
// of level <= L for every row (recomputing the lower levels, which keeps the
// memory one row per register) while the col_sums of level L + 1 add up
// their operand's rows in double. Most backward specs have col_sums only as
// outputs ([N] gradients of a bias or a norm's weight): they are complete
// after the pass below theirs, and the spec takes one pass.
template <class T>
struct Program {
  std::vector<Instr<T>> instrs;
  std::vector<std::uint32_t> out_regs;
};

// The outputs, each in its own shape ([M,N], [N] or [M]), in T.
template <class T>
std::vector<std::vector<T>> run_program(const Graph& g, Program<T>& prog, const Shape& shape,
                                        const LaunchArgs& args, const EvalOptions& options,
                                        std::int64_t element_base = 0) {
  const std::int64_t n_cols = shape.n, n_rows = shape.m;
  const std::size_t n_instrs = prog.instrs.size();
  // Levels, and the number of passes: a col_sum read only by outputs needs no pass of its own.
  std::vector<bool> read_by_op(n_instrs, false);
  int passes = 1;
  for (std::size_t k = 0; k < n_instrs; ++k) {
    Instr<T>& in = prog.instrs[k];
    if (in.kind != NodeKind::op) continue;
    for (Value a : g.nodes()[k].args) {
      in.level = std::max(in.level, prog.instrs[a.id].level);
      read_by_op[a.id] = true;
    }
    if (in.op == OpKind::col_sum) ++in.level;
  }
  for (std::size_t k = 0; k < n_instrs; ++k) {
    const Instr<T>& in = prog.instrs[k];
    const bool output_only_sum = in.kind == NodeKind::op && in.op == OpKind::col_sum && !read_by_op[k];
    passes = std::max(passes, (output_only_sum ? in.level - 1 : in.level) + 1);
  }
  // Column sums by register (double), complete once their level's pass has run.
  std::vector<std::vector<double>> col_sums(n_instrs);
  for (std::size_t k = 0; k < n_instrs; ++k)
    if (prog.instrs[k].kind == NodeKind::op && prog.instrs[k].op == OpKind::col_sum)
      col_sums[k].assign(static_cast<std::size_t>(n_cols), 0.0);

  std::vector<std::vector<T>> outs;
  for (std::uint32_t r : prog.out_regs)
    outs.emplace_back(static_cast<std::size_t>(shape_numel(g.nodes()[r].broadcast, shape)), T{0});

  std::vector<T> reg(n_instrs * static_cast<std::size_t>(n_cols));
  auto row_of = [&](std::uint32_t k) { return reg.data() + static_cast<std::size_t>(k) * n_cols; };
  for (int pass = 0; pass < passes; ++pass) {
    const bool last = pass == passes - 1;
    for (std::int64_t rr = 0; rr < n_rows; ++rr) {
      const std::int64_t r = options.reverse_traversal ? n_rows - 1 - rr : rr;
      for (std::size_t k = 0; k < n_instrs; ++k) {
        const Instr<T>& in = prog.instrs[k];
        T* out = row_of(static_cast<std::uint32_t>(k));
        if (in.level > pass + 1) continue;
        if (in.kind == NodeKind::op && in.op == OpKind::col_sum) {
          if (in.level == pass + 1) {  // add this row to the sum
            const T* x = row_of(in.a);
            for (std::int64_t c = 0; c < n_cols; ++c) col_sums[k][static_cast<std::size_t>(c)] += x[c];
          } else {
            for (std::int64_t c = 0; c < n_cols; ++c) out[c] = static_cast<T>(col_sums[k][static_cast<std::size_t>(c)]);
          }
          continue;
        }
        if (in.level > pass) continue;
        if (in.kind == NodeKind::op && is_row_reduction(in.op)) {
          std::fill(out, out + n_cols, row_reduce(in.op, row_of(in.a), n_cols));
          continue;
        }
        const bool op = in.kind == NodeKind::op;
        const T* x = op ? row_of(in.a) : nullptr;
        const T* y = op && op_info(in.op).arity > 1 ? row_of(in.b) : nullptr;
        for (std::int64_t cc = 0; cc < n_cols; ++cc) {
          const std::int64_t c = options.reverse_traversal ? n_cols - 1 - cc : cc;
          // i = r*N + c is the dropout element index (docs/design.md §4), after
          // element_base others in a batched GEMM (batch b: b*M*N).
          const std::int64_t i = r * n_cols + c;
          const auto draw_index = static_cast<std::uint64_t>(element_base + i);
          if (op) {
            out[c] = run_op(in, x[c], y ? y[c] : T{0}, draw_index, args);
            continue;
          }
          switch (in.index) {
            case Index::full: out[c] = in.data[i]; break;
            case Index::row: out[c] = in.data[c]; break;
            case Index::col: out[c] = in.data[r]; break;
            case Index::scalar: out[c] = in.data[0]; break;
          }
        }
      }
      if (!last) continue;
      for (std::size_t o = 0; o < outs.size(); ++o) {
        const std::uint32_t k = prog.out_regs[o];
        const T* v = row_of(k);
        switch (g.nodes()[k].broadcast) {
          case Broadcast::full: std::copy(v, v + n_cols, outs[o].begin() + r * n_cols); break;
          case Broadcast::col: outs[o][static_cast<std::size_t>(r)] = v[0]; break;
          default: break;  // [N]: below
        }
      }
    }
  }
  // [N] outputs: a col_sum read only by outputs from its sums; any other row
  // value is the same in every row (the last one computed is as good as any).
  for (std::size_t o = 0; o < outs.size(); ++o) {
    const std::uint32_t k = prog.out_regs[o];
    if (g.nodes()[k].broadcast != Broadcast::row) continue;
    const Instr<T>& in = prog.instrs[k];
    for (std::int64_t c = 0; c < n_cols; ++c)
      outs[o][static_cast<std::size_t>(c)] =
          in.kind == NodeKind::op && in.op == OpKind::col_sum ? static_cast<T>(col_sums[k][static_cast<std::size_t>(c)])
                                                               : (n_rows > 0 ? row_of(k)[c] : T{0});
  }
  return outs;
}

// Resolves the graph into a program over leaves already converted to T.
template <class T>
Program<T> resolve(const KernelSpec& spec, const Shape& shape, const std::vector<T> (&acc)[2],
                   const std::map<std::string, std::vector<T>>& leaves) {
  const Graph& g = spec.graph;
  Program<T> prog;
  for (const Node& n : g.nodes()) {
    Instr<T> in;
    in.kind = n.kind;
    switch (n.kind) {
      case NodeKind::accumulator:
        EPIFUSE_ASSERT(spec.mainloop.kind != MainloopKind::elementwise &&
                           (n.accumulator == 0 || spec.mainloop.kind == MainloopKind::dual_gemm),
                       "accumulator {} has no mainloop", n.accumulator);
        in.data = acc[n.accumulator].data();
        in.index = Index::full;
        break;
      case NodeKind::input:
        in.data = leaves.at(n.name).data();
        in.index = index_of(n.broadcast);
        break;
      case NodeKind::op:
        in.op = n.op;
        in.a = n.args.at(0).id;
        if (n.args.size() > 1) in.b = n.args[1].id;
        in.dtype = n.dtype;
        in.alpha = static_cast<float>(n.alpha);
        in.rng = n.rng;
        in.stream = static_cast<std::uint32_t>(n.stream);
        in.n = shape.n;
        if (n.op == OpKind::dropout) {
          in.thr = dropout_threshold(n.p);
          in.p = triton_probability(n.p);
          in.scale = dropout_scale(n.p);
        }
        break;
    }
    prog.instrs.push_back(in);
  }
  for (const Output& o : g.outputs()) prog.out_regs.push_back(o.value.id);
  return prog;
}

}  // namespace

void check_inputs(const KernelSpec& spec, const Shape& shape, const TensorMap& inputs) {
  check_required(spec, required_inputs(spec, shape), inputs);
}

namespace {

// One problem of a (possibly batched) GEMM chain: its dropout elements come
// after `element_base` others (docs/design.md §4, batched elements).
TensorMap evaluate_problem(const KernelSpec& spec, const Shape& shape, const TensorMap& inputs,
                           const LaunchArgs& args, const EvalOptions& options, std::int64_t element_base) {
  // Mainloop: the accumulators, in double then fp32.
  std::vector<float> acc[2];
  if (spec.mainloop.kind == MainloopKind::gemm) {
    acc[0] = gemm(operand(inputs.at("a"), spec.mainloop), operand(inputs.at("b"), spec.mainloop), shape);
  } else if (spec.mainloop.kind == MainloopKind::dual_gemm) {
    const auto a = operand(inputs.at("a"), spec.mainloop);
    acc[0] = gemm(a, operand(inputs.at("b0"), spec.mainloop), shape);
    acc[1] = gemm(a, operand(inputs.at("b1"), spec.mainloop), shape);
  }
  for (int i = 0; i < 2; ++i)
    if (options.accumulator_shift[i] != 0.0f)
      for (float& v : acc[i]) v += options.accumulator_shift[i];

  std::map<std::string, std::vector<float>> leaves;
  for (Value v : spec.graph.inputs()) {
    const Node& n = spec.graph.node(v);
    leaves.emplace(n.name, to_floats(inputs.at(n.name)));
  }
  Program<float> prog = resolve<float>(spec, shape, acc, leaves);
  const auto values = run_program(spec.graph, prog, shape, args, options, element_base);
  TensorMap outputs;
  const auto& outs = spec.graph.outputs();
  for (std::size_t o = 0; o < outs.size(); ++o) {
    HostTensor t = HostTensor::zeros(outs[o].dtype, operand_shape(spec.graph.node(outs[o].value).broadcast, shape));
    for (std::size_t i = 0; i < values[o].size(); ++i) t.set(static_cast<std::int64_t>(i), values[o][i]);
    const bool inserted = outputs.emplace(outs[o].name, std::move(t)).second;
    EPIFUSE_ASSERT(inserted, "duplicate output {}", outs[o].name);
  }
  return outputs;
}

// Batch b of a tensor stored [B, ...]: its b-th slice; a shared tensor as it is.
HostTensor batch_slice(const HostTensor& t, std::size_t rank, std::int64_t b) {
  if (t.shape.size() == rank) return t;
  HostTensor out;
  out.dtype = t.dtype;
  out.shape.assign(t.shape.begin() + 1, t.shape.end());
  const std::size_t bytes = t.bytes.size() / static_cast<std::size_t>(t.shape[0]);
  const auto first = t.bytes.begin() + static_cast<std::ptrdiff_t>(bytes * static_cast<std::size_t>(b));
  out.bytes.assign(first, first + static_cast<std::ptrdiff_t>(bytes));
  return out;
}

}  // namespace

TensorMap evaluate(const KernelSpec& spec, const Shape& shape, const TensorMap& inputs,
                   const LaunchArgs& args, const EvalOptions& options) {
  verify(spec);
  verify_shape(spec, shape);
  check_required(spec, required_inputs(spec, shape), inputs);
  if (shape.batch == 1) return evaluate_problem(spec, shape, inputs, args, options, 0);
  // Note [Batched GEMM] (src/codegen/gemm/gemm.hpp): a loop over the batches,
  // each one problem; outputs are [B, M, N], batch b's dropout elements after
  // b*M*N others.
  Shape one = shape;
  one.batch = 1;
  one.batch_stride_a = one.batch_stride_b = one.batch_stride_b1 = Shape::dense_batch;
  const auto single = required_inputs(spec, one);
  TensorMap outputs;
  for (std::int64_t b = 0; b < shape.batch; ++b) {
    TensorMap in;
    for (const OperandDesc& d : single) in.emplace(d.name, batch_slice(inputs.at(d.name), d.shape.size(), b));
    TensorMap out = evaluate_problem(spec, one, in, args, options, b * shape.m * shape.n);
    for (auto& [name, t] : out) {
      auto it = outputs.find(name);
      if (it == outputs.end()) {
        HostTensor all = HostTensor::zeros(t.dtype, {shape.batch, shape.m, shape.n});
        it = outputs.emplace(name, std::move(all)).first;
      }
      std::copy(t.bytes.begin(), t.bytes.end(),
                it->second.bytes.begin() + static_cast<std::ptrdiff_t>(t.bytes.size() * static_cast<std::size_t>(b)));
    }
  }
  return outputs;
}

std::vector<double> exact_product(const std::vector<double>& a, const std::vector<double>& b, const Shape& s) {
  const auto m = static_cast<std::size_t>(s.m), n = static_cast<std::size_t>(s.n), k = static_cast<std::size_t>(s.k);
  std::vector<double> out(m * n, 0.0);
  for (std::size_t r = 0; r < m; ++r)
    for (std::size_t kk = 0; kk < k; ++kk)
      for (std::size_t c = 0; c < n; ++c) out[r * n + c] += a[r * k + kk] * b[kk * n + c];
  return out;
}

DoubleTensors evaluate_double(const KernelSpec& spec, const Shape& shape, const DoubleTensors& inputs,
                              const LaunchArgs& args) {
  verify(spec);
  verify_shape(spec, shape);
  EPIFUSE_CHECK(shape.batch == 1, "evaluate_double: batch {} given; a gradient check runs one problem (batch 1)",
                shape.batch);
  const auto required = required_inputs(spec, shape);
  for (const auto& d : required) {
    auto it = inputs.find(d.name);
    EPIFUSE_CHECK(it != inputs.end(), "missing input '{}': expected {} values", d.name, shape_numel(d.shape));
    EPIFUSE_CHECK(static_cast<std::int64_t>(it->second.size()) == shape_numel(d.shape),
                  "input '{}': expected {} values ({}), got {}", d.name, shape_numel(d.shape), shape_str(d.shape),
                  it->second.size());
  }
  for (const auto& [name, v] : inputs) {
    const bool known = std::any_of(required.begin(), required.end(),
                                   [&name = name](const OperandDesc& d) { return d.name == name; });
    EPIFUSE_CHECK(known, "unknown input '{}'", name);
  }
  std::vector<double> acc[2];
  if (spec.mainloop.kind == MainloopKind::gemm) acc[0] = exact_product(inputs.at("a"), inputs.at("b"), shape);
  if (spec.mainloop.kind == MainloopKind::dual_gemm) {
    acc[0] = exact_product(inputs.at("a"), inputs.at("b0"), shape);
    acc[1] = exact_product(inputs.at("a"), inputs.at("b1"), shape);
  }
  Program<double> prog = resolve<double>(spec, shape, acc, inputs);
  auto values = run_program(spec.graph, prog, shape, args, EvalOptions{});
  DoubleTensors outputs;
  const auto& outs = spec.graph.outputs();
  for (std::size_t o = 0; o < outs.size(); ++o) outputs.emplace(outs[o].name, std::move(values[o]));
  return outputs;
}

}  // namespace epifuse
