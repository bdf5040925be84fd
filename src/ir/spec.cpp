#include "epifuse/spec.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "epifuse/errors.hpp"
#include "ir/limits.hpp"
#include "ir/names.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

std::string_view to_string(MainloopKind k) {
  switch (k) {
    case MainloopKind::elementwise: return "elementwise";
    case MainloopKind::gemm: return "gemm";
    case MainloopKind::dual_gemm: return "dual_gemm";
  }
  return "?";
}

std::string_view to_string(GemmMath m) { return m == GemmMath::tf32 ? "tf32" : "exact"; }

void verify(const KernelSpec& spec) {
  const Graph& g = spec.graph;
  verify(g);
  const Mainloop& ml = spec.mainloop;
  EPIFUSE_CHECK(ml.math == GemmMath::exact || (ml.kind != MainloopKind::elementwise && ml.a == DType::f32 &&
                                               ml.b == DType::f32),
                "mainloop math 'tf32' needs f32 operands (a={}, b={}); f16 and bf16 always use their own "
                "tensor-core math",
                to_string(ml.a), to_string(ml.b));
  bool has_full_input = false;
  const bool gemm = spec.mainloop.kind != MainloopKind::elementwise;
  for (const auto& n : g.nodes()) {
    if (n.kind == NodeKind::input && n.broadcast == Broadcast::full) has_full_input = true;
    if (n.kind == NodeKind::input && gemm)
      EPIFUSE_CHECK(!names::is_gemm_operand_name(n.name),
                    "input '{}': in a {} kernel the names {} are the GEMM operands", n.name,
                    to_string(spec.mainloop.kind), names::k_gemm_operand_list);
    if (n.kind != NodeKind::accumulator) continue;
    switch (spec.mainloop.kind) {
      case MainloopKind::elementwise:
        throw UserError("an elementwise kernel has no accumulator: read the input 'x' instead");
      case MainloopKind::gemm:
        EPIFUSE_CHECK(n.accumulator == 0, "a gemm kernel has one accumulator 'acc' (no 'acc1')");
        break;
      case MainloopKind::dual_gemm: break;
    }
  }
  if (spec.mainloop.kind == MainloopKind::elementwise)
    EPIFUSE_CHECK(has_full_input, "an elementwise kernel needs at least one full [M,N] input");
}

std::int64_t gemm_operand_extent(const Mainloop& ml, const Shape& s, int operand) {
  if (operand == 0) return ml.a_layout == Layout::row ? s.k : s.m;
  return ml.b_layout == Layout::col ? s.k : s.n;
}

namespace {
std::int64_t given_ld(const Shape& s, int operand) { return operand == 0 ? s.lda : operand == 1 ? s.ldb : s.ldb1; }
}  // namespace

std::int64_t gemm_operand_ld(const Mainloop& ml, const Shape& s, int operand) {
  const std::int64_t ld = given_ld(s, operand);
  return ld == 0 ? gemm_operand_extent(ml, s, operand) : ld;
}

bool gemm_operand_strided(const Mainloop& ml, const Shape& s, int operand) {
  const std::int64_t ld = given_ld(s, operand);
  return ld != 0 && ld != gemm_operand_extent(ml, s, operand);
}

namespace {
std::int64_t given_tensor_ld(const std::vector<std::int64_t>& lds, std::size_t index) {
  return index < lds.size() ? lds[index] : 0;
}
}  // namespace

std::int64_t input_ld(const Shape& s, std::size_t i) {
  const std::int64_t ld = given_tensor_ld(s.ld_inputs, i);
  return ld == 0 ? s.n : ld;
}

std::int64_t output_ld(const Shape& s, std::size_t j) {
  const std::int64_t ld = given_tensor_ld(s.ld_outputs, j);
  return ld == 0 ? s.n : ld;
}

bool input_strided(const Shape& s, std::size_t i) {
  const std::int64_t ld = given_tensor_ld(s.ld_inputs, i);
  return ld != 0 && ld != s.n;
}

bool output_strided(const Shape& s, std::size_t j) {
  const std::int64_t ld = given_tensor_ld(s.ld_outputs, j);
  return ld != 0 && ld != s.n;
}

bool epilogue_strided(const Shape& s) {
  const auto strided = [&](std::int64_t ld) { return ld != 0 && ld != s.n; };
  return std::any_of(s.ld_inputs.begin(), s.ld_inputs.end(), strided) ||
         std::any_of(s.ld_outputs.begin(), s.ld_outputs.end(), strided);
}

std::int64_t gemm_operand_size(const Mainloop& ml, const Shape& s, int operand) {
  // Stored rows: A row-major M, col-major K; B row-major K, col-major N.
  const bool row_major = operand == 0 ? ml.a_layout == Layout::row : ml.b_layout == Layout::row;
  const std::int64_t rows = operand == 0 ? (row_major ? s.m : s.k) : (row_major ? s.k : s.n);
  return rows * gemm_operand_ld(ml, s, operand);
}

std::int64_t gemm_operand_batch_stride(const Mainloop& ml, const Shape& s, int operand) {
  const std::int64_t given = operand == 0 ? s.batch_stride_a : operand == 1 ? s.batch_stride_b : s.batch_stride_b1;
  return given == Shape::dense_batch ? gemm_operand_size(ml, s, operand) : given;
}

namespace {

// Note [Batched GEMM] (src/codegen/gemm/gemm.hpp): a batch count, and per
// operand a batch stride that is shared (0) or keeps the batches apart. Full
// outputs are batched back to back; a column sum would add over batches, which
// is not built.
void verify_batch(const KernelSpec& spec, const Shape& s) {
  const MainloopKind kind = spec.mainloop.kind;
  EPIFUSE_CHECK(s.batch >= 1 && s.batch <= limits::k_max_batch,
                "shape: batch {} must be between 1 and {} (a launch's grid holds that many batches)", s.batch,
                limits::k_max_batch);
  EPIFUSE_CHECK(kind != MainloopKind::elementwise || s.batch == 1,
                "shape: batch {} given, but only GEMM chains are batched; an elementwise chain folds its leading "
                "dimensions into M",
                s.batch);
  EPIFUSE_CHECK(kind == MainloopKind::dual_gemm || s.batch_stride_b1 == Shape::dense_batch,
                "shape: batch stride of b1 given, but only a dual GEMM has a B1");
  if (s.batch == 1) return;
  for (const auto& out : spec.graph.outputs())
    EPIFUSE_CHECK(spec.graph.node(out.value).broadcast == Broadcast::full,
                  "shape: output '{}' is not a full [M,N] tensor; a batched GEMM stores full outputs only (a "
                  "column sum over batches is not built): run batch 1 per launch",
                  out.name);
  EPIFUSE_CHECK(s.m <= limits::k_max_elements / s.batch / std::max<std::int64_t>(s.n, 1),
                "shape: batch {} of M*N = {}*{} exceeds the limit of 2^48 elements", s.batch, s.m, s.n);
  const auto names = names::gemm_operand_names(kind);
  for (int i = 0; i < static_cast<int>(names.size()); ++i) {
    const std::int64_t given = i == 0 ? s.batch_stride_a : i == 1 ? s.batch_stride_b : s.batch_stride_b1;
    const std::int64_t size = gemm_operand_size(spec.mainloop, s, i);
    EPIFUSE_CHECK(given >= Shape::dense_batch,
                  "shape: operand '{}': batch stride {} must be 0 (shared), at least its {} elements, or "
                  "dense (-1)",
                  names[i], given, size);
    EPIFUSE_CHECK(given <= 0 || given >= size,
                  "shape: operand '{}': batch stride {} is less than its {} elements: batches would overlap",
                  names[i], given, size);
    const std::int64_t stride = gemm_operand_batch_stride(spec.mainloop, s, i);
    EPIFUSE_CHECK(stride == 0 || stride <= (limits::k_max_elements - size) / (s.batch - 1),
                  "shape: operand '{}': {} batches {} elements apart exceed the limit of 2^48 elements", names[i],
                  s.batch, stride);
  }
}

// Note [Strided operands] (docs/strided-batched.md): an operand's ld is the
// elements between its stored rows; below the rows' length they would overlap.
void verify_operand_lds(const KernelSpec& spec, const Shape& s) {
  const MainloopKind kind = spec.mainloop.kind;
  EPIFUSE_CHECK(kind != MainloopKind::elementwise || (s.lda == 0 && s.ldb == 0 && s.ldb1 == 0),
                "shape: a leading dimension (ld) is for GEMM operands; an elementwise chain has none");
  EPIFUSE_CHECK(kind == MainloopKind::dual_gemm || s.ldb1 == 0,
                "shape: ld of b1 given, but only a dual GEMM has a B1");
  const auto names = names::gemm_operand_names(kind);
  for (int i = 0; i < static_cast<int>(names.size()); ++i) {
    const std::int64_t ld = given_ld(s, i), extent = gemm_operand_extent(spec.mainloop, s, i);
    const bool row_major = i == 0 ? spec.mainloop.a_layout == Layout::row : spec.mainloop.b_layout == Layout::row;
    const char* what = i == 0 ? (row_major ? "K" : "M") : (row_major ? "N" : "K");
    EPIFUSE_CHECK(ld >= 0 && ld <= limits::k_max_dim, "shape: operand '{}': ld {} must be between 0 (dense) and 2^40",
                  names[i], ld);
    EPIFUSE_CHECK(ld == 0 || ld >= extent,
                  "shape: operand '{}': ld {} is less than its rows' {} elements ({}, {}-major): rows would overlap",
                  names[i], ld, extent, what, row_major ? "row" : "column");
    const std::int64_t rows = i == 0 ? (row_major ? s.m : s.k) : (row_major ? s.k : s.n);
    EPIFUSE_CHECK(ld == 0 || rows <= limits::k_max_elements / ld,
                  "shape: operand '{}': {} rows of ld {} exceed the limit of 2^48 elements", names[i], rows, ld);
  }
}

// Note [Strided epilogue tensors] (src/codegen/gemm/gemm.hpp): a chain's full
// [M,N] input or output may have rows ld >= N elements apart, in every family
// (the elementwise and row families: Note [Strided rows] in
// src/codegen/elementwise/elementwise.hpp). Row, column and scalar inputs and
// column-sum outputs have no rows to space; a batched GEMM's full tensors are
// [B, M, N] back to back (a strided one is not built).
void verify_tensor_lds(const KernelSpec& spec, const Shape& s) {
  const Graph& g = spec.graph;
  const bool given = std::any_of(s.ld_inputs.begin(), s.ld_inputs.end(), [](std::int64_t ld) { return ld != 0; }) ||
                     std::any_of(s.ld_outputs.begin(), s.ld_outputs.end(), [](std::int64_t ld) { return ld != 0; });
  if (!given) return;
  EPIFUSE_CHECK(s.ld_inputs.size() <= g.inputs().size() && s.ld_outputs.size() <= g.outputs().size(),
                "shape: lds given for {} inputs and {} outputs, the chain has {} and {}", s.ld_inputs.size(),
                s.ld_outputs.size(), g.inputs().size(), g.outputs().size());
  const auto check = [&](const char* what, const std::string& name, Broadcast broadcast, std::int64_t ld) {
    if (ld == 0) return;
    EPIFUSE_CHECK(broadcast == Broadcast::full,
                  "shape: {} '{}': an ld is for a full [M,N] tensor, and '{}' is {} (its elements are adjacent)",
                  what, name, name, broadcast == Broadcast::row ? "[N]" : broadcast == Broadcast::col ? "[M]" : "a scalar");
    EPIFUSE_CHECK(ld >= 0 && ld <= limits::k_max_dim, "shape: {} '{}': ld {} must be between 0 (dense) and 2^40", what,
                  name, ld);
    EPIFUSE_CHECK(ld >= s.n, "shape: {} '{}': ld {} is less than its rows' {} elements (N): rows would overlap", what,
                  name, ld, s.n);
    EPIFUSE_CHECK(s.m <= limits::k_max_elements / ld, "shape: {} '{}': {} rows of ld {} exceed the limit of 2^48 elements",
                  what, name, s.m, ld);
    EPIFUSE_CHECK(s.batch == 1 || ld == s.n,
                  "shape: {} '{}' is strided (ld {}) in a batched GEMM (batch {}): a batched GEMM's full tensors are "
                  "[B, M, N] back to back; strided ones are not built (pass a dense copy)",
                  what, name, ld, s.batch);
  };
  std::size_t strided = 0;
  for (std::size_t i = 0; i < s.ld_inputs.size(); ++i) {
    const Node& n = g.node(g.inputs()[i]);
    check("input", n.name, n.broadcast, s.ld_inputs[i]);
    strided += input_strided(s, i) ? 1 : 0;
  }
  for (std::size_t j = 0; j < s.ld_outputs.size(); ++j) {
    const Output& o = g.outputs()[j];
    check("output", o.name, g.node(o.value).broadcast, s.ld_outputs[j]);
    strided += output_strided(s, j) ? 1 : 0;
  }
  EPIFUSE_CHECK(strided <= limits::k_max_strided_tensors,
                "shape: {} strided [M,N] tensors exceed the limit of {} in one kernel (each ld is a kernel parameter)",
                strided, limits::k_max_strided_tensors);
}

}  // namespace

void verify_shape(const KernelSpec& spec, const Shape& s) {
  using limits::k_max_dim;
  using limits::k_max_elements;
  const bool gemm = spec.mainloop.kind != MainloopKind::elementwise;
  // M = 0 or N = 0 is an empty result (PyTorch's too): no kernel runs
  // (Jit::launch returns at once), outputs have no elements.
  EPIFUSE_CHECK(s.m >= 0 && s.n >= 0, "shape: M and N must not be negative, got M={} N={}", s.m, s.n);
  // K = 0 is a GEMM of a zero accumulator (PyTorch's result too): the epilogue still runs.
  EPIFUSE_CHECK(!gemm || s.k >= 0, "shape: K must not be negative, got K={}", s.k);
  EPIFUSE_CHECK(s.m <= k_max_dim && s.n <= k_max_dim && s.k <= k_max_dim,
                "shape: a dimension exceeds the limit of 2^40 = {}, got M={} N={} K={}", k_max_dim,
                s.m, s.n, s.k);
  EPIFUSE_CHECK(s.n == 0 || s.m <= k_max_elements / s.n,
                "shape: M*N = {}*{} exceeds the limit of 2^48 = {} elements", s.m, s.n, k_max_elements);
  EPIFUSE_CHECK(!gemm || s.k == 0 || (s.m <= k_max_elements / s.k && s.n <= k_max_elements / s.k),
                "shape: the operands A [M,K] and B [K,N] exceed the limit of 2^48 = {} elements, got M={} N={} K={}",
                k_max_elements, s.m, s.n, s.k);
  verify_operand_lds(spec, s);
  verify_tensor_lds(spec, s);
  verify_batch(spec, s);
}

namespace {

// Renders the spec; `canonical` replaces every name by its position.
// Written straight into one buffer: the signature is built on every cache
// lookup, so this is on the hit path (docs/perf/host.md, "Launch and cache hit").
std::string render(const KernelSpec& spec, bool canonical) {
  const Graph& g = spec.graph;
  const auto& nodes = g.nodes();
  fmt::memory_buffer out;
  auto put = [&](std::string_view format, auto&&... args) {
    fmt::vformat_to(std::back_inserter(out), format, fmt::make_format_args(args...));
  };
  // A value's reference: its name, or (canonical / unnamed) its position among
  // inputs (in<k>) or ops (v<k>), so leaves created between ops change nothing.
  std::vector<int> index(nodes.size(), 0);
  auto ref = [&](std::size_t i) {
    const Node& n = nodes[i];
    if (n.kind == NodeKind::accumulator) {
      put("{}", names::accumulator_name(spec.mainloop.kind, n.accumulator));
    } else if (!canonical && !n.name.empty()) {
      put("{}", n.name);
    } else {
      put("{}{}", n.kind == NodeKind::input ? "in" : "v", index[i]);
    }
  };
  const auto& ml = spec.mainloop;
  if (ml.kind == MainloopKind::elementwise) put("mainloop elementwise\n");
  else
    put("mainloop {} a={}:{} b={}:{}{}\n", to_string(ml.kind), to_string(ml.a), to_string(ml.a_layout),
        to_string(ml.b), to_string(ml.b_layout), ml.math == GemmMath::tf32 ? " math=tf32" : "");
  if (spec.precision == Precision::fast) put("precision fast\n");
  int inputs = 0, ops = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].kind == NodeKind::input) index[i] = inputs++;
    if (nodes[i].kind == NodeKind::op) index[i] = ops++;
  }
  // Leaves first (inputs in declaration order), then ops in build order.
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].kind != NodeKind::input) continue;
    put("input ");
    ref(i);
    put(": {} {}{}\n", to_string(nodes[i].dtype), to_string(nodes[i].broadcast),
        !canonical && !nodes[i].differentiable ? " no_grad" : "");
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.kind != NodeKind::op) continue;
    ref(i);
    put(" = {}(", op_info(n.op).name);
    for (std::size_t a = 0; a < n.args.size(); ++a) {
      if (a) put(", ");
      ref(n.args[a].id);
    }
    put(")");
    // Attributes print round-trip exact so the signature tells them apart.
    if (n.op == OpKind::scale) put(" alpha={}", n.alpha);
    if (n.op == OpKind::add_scalar) put(" c={}", n.alpha);
    if (n.op == OpKind::dropout) put(" p={} rng={} stream={}", n.p, to_string(n.rng), n.stream);
    if (n.op == OpKind::cast) put(" to={}", to_string(n.dtype));
    put(" : {}\n", to_string(n.broadcast));
  }
  for (std::size_t o = 0; o < g.outputs().size(); ++o) {
    const Output& oc = g.outputs()[o];
    if (canonical) put("output out{} = ", o);
    else put("output {} = ", oc.name);
    ref(oc.value.id);
    put(" : {}\n", to_string(oc.dtype));
  }
  return fmt::to_string(out);
}

}  // namespace

std::string signature_bytes(const KernelSpec& spec) {
  const auto& nodes = spec.graph.nodes();
  std::string out;
  out.reserve(16 + nodes.size() * 24 + spec.graph.outputs().size() * 8);
  auto put = [&](const auto& v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  const auto& ml = spec.mainloop;
  put(static_cast<std::uint8_t>(ml.kind));
  if (ml.kind != MainloopKind::elementwise) {
    put(static_cast<std::uint8_t>(ml.a));
    put(static_cast<std::uint8_t>(ml.b));
    put(static_cast<std::uint8_t>(ml.a_layout));
    put(static_cast<std::uint8_t>(ml.b_layout));
    put(static_cast<std::uint8_t>(ml.math));
  }
  put(static_cast<std::uint8_t>(spec.precision));
  // Canonical operand references, as in render(): leaves by kind and index,
  // ops by their position among ops.
  std::vector<std::uint32_t> ref(nodes.size());
  std::uint32_t inputs = 0, ops = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.kind == NodeKind::accumulator) ref[i] = 0x80000000u | static_cast<std::uint32_t>(n.accumulator);
    if (n.kind == NodeKind::input) {
      ref[i] = 0x40000000u | inputs++;
      put(static_cast<std::uint8_t>(n.dtype));
      put(static_cast<std::uint8_t>(n.broadcast));
    }
    if (n.kind == NodeKind::op) ref[i] = ops++;
  }
  put(inputs);
  for (const Node& n : nodes) {
    if (n.kind != NodeKind::op) continue;
    put(static_cast<std::uint8_t>(n.op));
    for (Value a : n.args) put(ref[a.id]);
    // scale's alpha is a kernel parameter, add_scalar's c a literal in the
    // code: both tell kernels apart here.
    if (n.op == OpKind::scale || n.op == OpKind::add_scalar) put(n.alpha);
    if (n.op == OpKind::dropout) {
      put(n.p);
      put(static_cast<std::uint8_t>(n.rng));
      put(n.stream);
    }
    if (n.op == OpKind::cast) put(static_cast<std::uint8_t>(n.dtype));
  }
  put(ops);
  for (const Output& o : spec.graph.outputs()) {
    put(ref[o.value.id]);
    put(static_cast<std::uint8_t>(o.dtype));
  }
  return out;
}

std::string print(const KernelSpec& spec) { return render(spec, false); }
std::string signature(const KernelSpec& spec) { return render(spec, true); }

}  // namespace epifuse
