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

std::vector<std::string> mainloop_operand_names(MainloopKind kind) {
  const auto names = names::gemm_operand_names(kind);
  return {names.begin(), names.end()};
}

std::vector<OperandDesc> required_inputs(const KernelSpec& spec, const Shape& shape) {
  std::vector<OperandDesc> out;
  for (const auto& name : mainloop_operand_names(spec.mainloop.kind)) {
    if (name == names::k_gemm_operands[0])
      out.push_back({name, spec.mainloop.a, {shape.m, shape.k}});
    else
      out.push_back({name, spec.mainloop.b, {shape.k, shape.n}});
  }
  for (Value v : spec.graph.inputs()) {
    const Node& n = spec.graph.node(v);
    out.push_back({n.name, n.dtype, operand_shape(n.broadcast, shape)});
  }
  return out;
}

namespace {

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

// One node of the resolved program; registers are node indices.
struct Instr {
  NodeKind kind = NodeKind::op;
  OpKind op = OpKind::add;
  std::uint32_t a = 0, b = 0;       // operand registers
  const float* data = nullptr;      // leaves
  Index index = Index::full;        // leaves
  DType dtype = DType::f32;         // cast
  float alpha = 1.0f;               // scale: the fp32 runtime scalar; add_scalar: c as the code's float literal
  RngMode rng = RngMode::philox4;   // dropout
  std::uint32_t stream = 0;         // dropout
  std::uint32_t thr = 0;            // dropout, philox4
  float p = 0.0f;                   // dropout, triton
  float scale = 1.0f;               // dropout
};

struct Program {
  std::vector<Instr> instrs;
  std::vector<std::uint32_t> out_regs;
};

// One op at one element: x and y its operands' values there.
float run_op(const Instr& in, float x, float y, std::uint64_t i, const LaunchArgs& args) {
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
    case OpKind::row_max:
    case OpKind::row_sum:
    case OpKind::row_mean: break;  // whole-row ops: row_reduce
    case OpKind::dropout: {
      const bool keep =
          in.rng == RngMode::triton
              ? ef_triton_keep(ef_triton_draw(args.seed, args.offset, i), in.p)
              : ef_dropout_keep(ef_philox4_draw(args.seed, args.offset, in.stream, i), in.thr);
      // x * mask * scale as PyTorch computes it: a dropped NaN or inf is NaN.
      return x * (keep ? in.scale : 0.0f);  // the fp32 multiply of docs/design.md §4
    }
  }
  EPIFUSE_ASSERT(false, "unhandled op {}", static_cast<int>(in.op));
  return 0.0f;
}

// A reduction over one row of its operand, in column order: max with NaN
// propagating (the first NaN), sum and mean in double, rounded to float once.
float row_reduce(OpKind op, const float* a, std::int64_t n) {
  if (op == OpKind::row_max) {
    float m = -std::numeric_limits<float>::infinity();
    for (std::int64_t c = 0; c < n; ++c) m = ref_ops::max(m, a[c]);
    return m;
  }
  double sum = 0.0;
  for (std::int64_t c = 0; c < n; ++c) sum += a[c];
  return static_cast<float>(op == OpKind::row_mean ? sum / static_cast<double>(n) : sum);
}

}  // namespace

void check_inputs(const KernelSpec& spec, const Shape& shape, const TensorMap& inputs) {
  check_required(spec, required_inputs(spec, shape), inputs);
}

double accumulation_bound(const KernelSpec& spec, const Shape& shape, const TensorMap& inputs) {
  if (spec.mainloop.kind == MainloopKind::elementwise || shape.k == 0) return 0.0;
  auto peak = [&](const std::string& name) {
    const HostTensor& t = inputs.at(name);
    double m = 0;
    for (std::int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(t.get(i))));
    return m;
  };
  double b = 0;
  for (const auto& name : mainloop_operand_names(spec.mainloop.kind))
    if (name != "a") b = std::max(b, peak(name));
  return static_cast<double>(shape.k) * std::ldexp(1.0, -21) * peak("a") * b;
}

TensorMap evaluate(const KernelSpec& spec, const Shape& shape, const TensorMap& inputs,
                   const LaunchArgs& args, const EvalOptions& options) {
  verify(spec);
  verify_shape(spec, shape);
  const auto required = required_inputs(spec, shape);
  check_required(spec, required, inputs);

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

  // Resolve the graph into a program.
  const Graph& g = spec.graph;
  std::vector<std::vector<float>> leaves;
  leaves.reserve(g.nodes().size());
  Program prog;
  for (const Node& n : g.nodes()) {
    Instr in;
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
        leaves.push_back(to_floats(inputs.at(n.name)));
        in.data = leaves.back().data();
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

  TensorMap outputs;
  std::vector<HostTensor*> out_tensors;
  for (const Output& o : g.outputs()) {
    auto [it, inserted] = outputs.emplace(o.name, HostTensor::zeros(o.dtype, {shape.m, shape.n}));
    EPIFUSE_ASSERT(inserted, "duplicate output {}", o.name);
    out_tensors.push_back(&it->second);
  }

  // Run row by row: each instruction over the row's columns in program
  // order, so a row reduction finds its operand's whole row computed (a
  // reduction is one value, kept in every column of its register).
  // i = r*N + c is the dropout element index (docs/design.md §4).
  const std::int64_t n_cols = shape.n, n_rows = shape.m;
  const std::size_t n_instrs = prog.instrs.size();
  std::vector<float> reg(n_instrs * static_cast<std::size_t>(n_cols));
  auto row_of = [&](std::uint32_t k) { return reg.data() + static_cast<std::size_t>(k) * n_cols; };
  for (std::int64_t rr = 0; rr < n_rows; ++rr) {
    const std::int64_t r = options.reverse_traversal ? n_rows - 1 - rr : rr;
    for (std::size_t k = 0; k < n_instrs; ++k) {
      const Instr& in = prog.instrs[k];
      float* out = row_of(static_cast<std::uint32_t>(k));
      if (in.kind == NodeKind::op && is_row_reduction(in.op)) {
        std::fill(out, out + n_cols, row_reduce(in.op, row_of(in.a), n_cols));
        continue;
      }
      const bool op = in.kind == NodeKind::op;
      const float* x = op ? row_of(in.a) : nullptr;
      const float* y = op && op_info(in.op).arity > 1 ? row_of(in.b) : nullptr;
      for (std::int64_t cc = 0; cc < n_cols; ++cc) {
        const std::int64_t c = options.reverse_traversal ? n_cols - 1 - cc : cc;
        const std::int64_t i = r * n_cols + c;
        if (op) {
          out[c] = run_op(in, x[c], y ? y[c] : 0.0f, static_cast<std::uint64_t>(i), args);
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
    for (std::size_t o = 0; o < out_tensors.size(); ++o) {
      const float* v = row_of(prog.out_regs[o]);
      for (std::int64_t c = 0; c < n_cols; ++c) out_tensors[o]->set(r * n_cols + c, v[c]);
    }
  }
  return outputs;
}

TensorMap make_inputs(const KernelSpec& spec, const Shape& shape, std::uint64_t data_seed,
                      TensorMap given) {
  for (const auto& d : required_inputs(spec, shape)) {
    if (given.count(d.name)) continue;
    // One sub-seed per name (FNV-1a), so adding an input does not change the others.
    std::uint64_t h = 0xCBF29CE484222325ull;
    for (unsigned char ch : d.name) h = (h ^ ch) * 0x100000001B3ull;
    given.emplace(d.name, random_tensor(d.dtype, d.shape, data_seed ^ h));
  }
  return given;
}

}  // namespace epifuse
