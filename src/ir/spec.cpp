#include "epifuse/spec.hpp"

#include <fmt/format.h>

#include "epifuse/errors.hpp"
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

void verify(const KernelSpec& spec) {
  const Graph& g = spec.graph;
  verify(g);
  bool has_full_input = false;
  const bool gemm = spec.mainloop.kind != MainloopKind::elementwise;
  for (const auto& n : g.nodes()) {
    if (n.kind == NodeKind::input && n.broadcast == Broadcast::full) has_full_input = true;
    if (n.kind == NodeKind::input && gemm)
      EPIFUSE_CHECK(n.name != "a" && n.name != "b" && n.name != "b0" && n.name != "b1",
                    "input '{}': in a {} kernel the names a, b, b0, b1 are the GEMM operands",
                    n.name, to_string(spec.mainloop.kind));
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

void verify_shape(const KernelSpec& spec, const Shape& s) {
  constexpr std::int64_t k_max_dim = std::int64_t{1} << 40;
  constexpr std::int64_t k_max_elems = std::int64_t{1} << 48;
  const bool gemm = spec.mainloop.kind != MainloopKind::elementwise;
  EPIFUSE_CHECK(s.m > 0 && s.n > 0, "shape: M and N must be positive, got M={} N={}", s.m, s.n);
  EPIFUSE_CHECK(!gemm || s.k > 0, "shape: a {} kernel needs K > 0 (--shape M,N,K)",
                to_string(spec.mainloop.kind));
  EPIFUSE_CHECK(s.m <= k_max_dim && s.n <= k_max_dim && s.k <= k_max_dim,
                "shape: dimension too large (at most 2^40), got M={} N={} K={}", s.m, s.n, s.k);
  EPIFUSE_CHECK(s.m <= k_max_elems / s.n, "shape: M*N too large (at most 2^48 elements)");
}

namespace {

// Renders the spec; `canonical` replaces every name by its position.
std::string render(const KernelSpec& spec, bool canonical) {
  const Graph& g = spec.graph;
  std::vector<std::string> ref(g.nodes().size());
  std::string out;
  const auto& ml = spec.mainloop;
  if (ml.kind == MainloopKind::elementwise) {
    out += "mainloop elementwise\n";
  } else {
    out += fmt::format("mainloop {} a={}:{} b={}:{}\n", to_string(ml.kind), to_string(ml.a),
                       to_string(ml.a_layout), to_string(ml.b), to_string(ml.b_layout));
  }
  if (spec.precision == Precision::fast) out += "precision fast\n";
  // Values are numbered by their index among ops (and inputs among inputs),
  // so the signature does not depend on when leaves were created.
  int input_index = 0, op_index = 0;
  // Leaves first (inputs in declaration order), then ops in build order.
  for (std::size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.kind == NodeKind::accumulator) {
      ref[i] = ml.kind == MainloopKind::dual_gemm ? fmt::format("acc{}", n.accumulator) : "acc";
    } else if (n.kind == NodeKind::input) {
      ref[i] = canonical || n.name.empty() ? fmt::format("in{}", input_index) : n.name;
      out += fmt::format("input {}: {} {}\n", ref[i], to_string(n.dtype), to_string(n.broadcast));
      ++input_index;
    }
  }
  for (std::size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.kind != NodeKind::op) continue;
    ref[i] = canonical || n.name.empty() ? fmt::format("v{}", op_index) : n.name;
    ++op_index;
    std::string line = fmt::format("{} = {}(", ref[i], op_info(n.op).name);
    for (std::size_t a = 0; a < n.args.size(); ++a) line += (a ? ", " : "") + ref[n.args[a].id];
    line += ")";
    // Attributes print round-trip exact so the signature tells them apart.
    if (n.op == OpKind::scale) line += fmt::format(" alpha={}", n.alpha);
    if (n.op == OpKind::dropout) line += fmt::format(" p={} rng={} stream={}", n.p, to_string(n.rng), n.stream);
    if (n.op == OpKind::cast) line += fmt::format(" to={}", to_string(n.dtype));
    out += fmt::format("{} : {}\n", line, to_string(n.broadcast));
  }
  for (std::size_t o = 0; o < g.outputs().size(); ++o) {
    const Output& oc = g.outputs()[o];
    out += fmt::format("output {} = {} : {}\n", canonical ? fmt::format("out{}", o) : oc.name,
                       ref[oc.value.id], to_string(oc.dtype));
  }
  return out;
}

}  // namespace

std::string print(const KernelSpec& spec) { return render(spec, false); }
std::string signature(const KernelSpec& spec) { return render(spec, true); }

}  // namespace epifuse
