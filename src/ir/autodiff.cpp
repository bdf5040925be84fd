// grad(spec): reverse-mode differentiation over the IR (docs/autodiff.md).
//
// The backward graph is built through the builder, so every check of a
// hand-written graph holds for it. Three maps tie it to the forward graph:
//   - `active`: the forward nodes a differentiated input reaches and that
//     reach an output; only they carry an adjoint (an output no such node
//     feeds gets no `d<y>` input, so the backward has no unused input);
//   - `adjoint`: per forward node, the sum of its users' contributions, kept
//     unreduced (a [N] value's adjoint may be a sum of [M,N] terms) and reduced
//     once to the node's shape class: one col_sum per bias, not one per use;
//   - `value`: per forward node, the value the derivative rules read, made
//     in the backward graph on first use (Note [What the backward reads]).
// A GEMM chain is differentiated twice: the first pass records which forward
// values the rules read, choose_saved picks the values to save from them
// (Note [Saving a minimum cut] in saved_state.cpp), and the second builds the
// backward that saves those and recomputes the rest.
#include "epifuse/autodiff.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "epifuse/errors.hpp"
#include "ir/limits.hpp"
#include "ir/names.hpp"
#include "ir/op_table.hpp"
#include "ir/composites.hpp"
#include "ir/saved_state.hpp"

namespace epifuse {

namespace {

// Note [What the backward reads]
// A derivative rule reads forward values (gelu_tanh's reads its operand). The
// backward graph gets each one the cheapest way the contract allows (§9):
//   - a forward input: the same input, read again;
//   - a value computed from inputs alone by elementwise ops (dropout too: it
//     is regenerated from the same stream, never saved): recomputed, which
//     reads the same bytes a saved copy would and keeps fp32 accuracy;
//   - a value that needs a GEMM accumulator (the accumulators are not kept):
//     saved by the forward as an extra [M,N] output in the dtype of its first
//     output (the pre-activation aux of cuBLASLt's epilogues), or recomputed
//     elementwise from values that are: the fewest tensors that give every
//     value read are saved (Note [Saving a minimum cut]);
//   - a row reduction (softmax's max and sum, a norm's mean and variance):
//     saved as an [M] f32 output, a per-row statistic.
// Recomputing rather than saving is what lets a chain's forward write only
// its own outputs. A ReLU reads its derivative from an output that carries
// its sign where one does (Note [ReLU's derivative from an output] in
// saved_state.cpp); a 1-bit mask would need a packed dtype the IR does not
// have, so a ReLU on an accumulator that no output follows saves its
// pre-activation instead. A softmax's result that no output stores is saved
// where that moves no more bytes than recomputing it (Note [Choices of what
// the backward reads] in saved_state.cpp).

class Differentiator {
 public:
  // `to_save`: per forward node, whether an accumulator-dependent value is
  // saved (choose_saved) or recomputed. Without it, every such value read is
  // saved under a placeholder name, past the limits on names and outputs: a
  // first pass that only records what the rules read (record_reads).
  Differentiator(const KernelSpec& spec, const GradOptions& options, std::optional<std::vector<bool>> to_save,
                 std::vector<bool> read_choice)
      : spec_(spec), g_(spec.graph), to_save_(std::move(to_save)), read_choice_(std::move(read_choice)) {
    count_users(g_, users_, user_list_);
    stabilizing_ = stabilizing_maxima(g_, users_, user_list_, composites_);
    acc_dep_ = accumulator_dependent(g_);
    choose_wrt(options);
    mark_active();
  }

  // Per forward node, whether a derivative rule reads it.
  std::vector<bool> record_reads() {
    sweep();
    return reads_;
  }

  GradResult run() {
    sweep();
    GradResult r;
    r.forward = spec_;
    for (std::uint32_t w : wrt_) {
      const Node& n = g_.nodes()[w];
      const std::string shown = leaf_name(w);
      Value d = reduce(w, n.broadcast);
      EPIFUSE_ASSERT(d.valid(), "active input '{}' has no adjoint", shown);
      if (n.broadcast == Broadcast::full && b().node(d).broadcast != Broadcast::full) d = b().expand(d);
      const std::string name = gradient_name(shown);
      check_free(name, fmt::format("the gradient of '{}'", shown));
      const DType dt = n.kind == NodeKind::input ? n.dtype : saved_dtype_;
      b().output(name, d, dt);
      r.wrt.push_back(shown);
    }
    for (const auto& s : saved_) {
      if (s.kind != "output") r.forward.graph.output(s.name, s.forward_value, s.dtype);
      r.saved.push_back({s.name, s.kind, s.of});
    }
    verify(out_);
    verify(r.forward);
    r.backward = std::move(out_);
    return r;
  }

 private:
  struct Saved {
    std::string name, kind, of;
    Value forward_value;
    DType dtype;
  };

  Graph& b() { return out_.graph; }

  // The backward graph up to the gradients of the inputs: the upstream
  // gradients, then every op's rule in reverse order.
  void sweep() {
    out_.name = spec_.name.empty() ? "backward" : fmt::format("{}_backward", spec_.name);
    if (out_.name.size() > 200) out_.name = "backward";
    out_.mainloop = Mainloop{};
    out_.precision = spec_.precision;
    if (spec_.default_shape) out_.default_shape = Shape{spec_.default_shape->m, spec_.default_shape->n, 0};
    value_.assign(g_.nodes().size(), Value{});
    adjoint_.assign(g_.nodes().size(), {});
    reads_.assign(g_.nodes().size(), false);
    saved_dtype_ = g_.outputs().front().dtype;

    // Upstream gradients: one input per output an active node feeds.
    for (const Output& o : g_.outputs()) {
      if (!active_[o.value.id]) continue;
      const std::string name = gradient_name(o.name);
      check_free(name, fmt::format("the gradient of output '{}'", o.name));
      const Value d = b().input(name, o.dtype, g_.node(o.value).broadcast);
      contribute(o.value.id, d);
    }
    // Reverse order of the forward's nodes is a reverse topological order.
    for (std::uint32_t i = static_cast<std::uint32_t>(g_.nodes().size()); i-- > 0;) {
      const Node& n = g_.nodes()[i];
      if (n.kind != NodeKind::op) continue;
      if (const Value d = reduce(i, n.broadcast); d.valid()) propagate(i, d);
    }
  }

  std::string leaf_name(std::uint32_t i) const {
    const Node& n = g_.nodes()[i];
    if (n.kind == NodeKind::accumulator) return std::string(names::accumulator_name(spec_.mainloop.kind, n.accumulator));
    return n.name;
  }

  static std::string gradient_name(std::string_view of) { return fmt::format("d{}", of); }

  // A name the backward graph introduces must not be a forward input's (which
  // the backward may read under its own name) nor already taken there.
  void check_free(const std::string& name, const std::string& what) {
    EPIFUSE_CHECK(name.size() <= limits::k_max_name_length,
                  "{} would be named '{}', longer than the limit of {} characters: shorten the name",
                  what, names::excerpt(name), limits::k_max_name_length);
    const Value f = g_.find(name);
    EPIFUSE_CHECK(!(f.valid() && g_.node(f).kind == NodeKind::input) && !b().find(name).valid(),
                  "{} would be named '{}', which the chain already uses: rename that input", what, name);
  }

  void choose_wrt(const GradOptions& options) {
    const auto& nodes = g_.nodes();
    std::vector<std::string> known;
    for (std::uint32_t i = 0; i < nodes.size(); ++i)
      if (nodes[i].kind != NodeKind::op) known.push_back(leaf_name(i));
    auto find_leaf = [&](std::string_view name) -> std::optional<std::uint32_t> {
      for (std::uint32_t i = 0; i < nodes.size(); ++i)
        if (nodes[i].kind != NodeKind::op && leaf_name(i) == name) return i;
      return std::nullopt;
    };
    if (options.wrt.empty()) {
      for (std::uint32_t i = 0; i < nodes.size(); ++i)
        if (nodes[i].kind == NodeKind::accumulator || (nodes[i].kind == NodeKind::input && nodes[i].differentiable &&
                                                        nodes[i].broadcast != Broadcast::scalar))
          wrt_.push_back(i);
      EPIFUSE_CHECK(!wrt_.empty(), "grad: the chain has no differentiable input (every input is marked \"grad\": false)");
      return;
    }
    std::set<std::uint32_t> seen;
    for (const std::string& name : options.wrt) {
      EPIFUSE_CHECK(name != "seed" && name != "offset",
                    "grad: '{}' is the dropout RNG's {}, not an input: a mask is not differentiable", name, name);
      if (names::is_gemm_operand_name(name) && spec_.mainloop.kind != MainloopKind::elementwise)
        throw UserError(fmt::format(
            "grad: '{}' is a GEMM operand: differentiate with respect to the accumulator ('{}') and run the dgrad "
            "and wgrad GEMMs on its gradient",
            name, names::accumulator_name(spec_.mainloop.kind, 0)));
      const auto i = find_leaf(name);
      EPIFUSE_CHECK(i.has_value(), "grad: '{}' is not an input of the chain (inputs: {})", names::excerpt(name),
                    fmt::join(known, ", "));
      const Node& n = nodes[*i];
      EPIFUSE_CHECK(n.kind != NodeKind::input || n.differentiable,
                    "grad: input '{}' is marked not differentiable (\"grad\": false)", name);
      EPIFUSE_CHECK(n.kind != NodeKind::input || n.broadcast != Broadcast::scalar,
                    "grad: input '{}' is a scalar; the gradient of a scalar input is not supported (make it a row "
                    "or col vector)", name);
      EPIFUSE_CHECK(seen.insert(*i).second, "grad: '{}' is named twice", name);
      wrt_.push_back(*i);
    }
  }

  // Ops whose derivative is zero wherever it exists: nothing flows through them.
  static bool blocks_gradient(OpKind op) { return op == OpKind::step || op == OpKind::relu_deriv; }

  void mark_active() {
    const auto& nodes = g_.nodes();
    std::vector<bool> from_wrt(nodes.size(), false), to_output(nodes.size(), false);
    for (std::uint32_t w : wrt_) from_wrt[w] = true;
    for (std::uint32_t i = 0; i < nodes.size(); ++i) {
      const Node& n = nodes[i];
      if (n.kind != NodeKind::op || blocks_gradient(n.op)) continue;
      for (std::size_t a = 0; a < n.args.size(); ++a) {
        const std::uint32_t arg = n.args[a].id;
        if (n.op == OpKind::sub && a == 1 && stabilizing_[arg]) continue;  // softmax's max: no gradient
        from_wrt[i] = from_wrt[i] || from_wrt[arg];
      }
    }
    // reaches[i]: some output reads node i at all; to_output[i]: through ops with a derivative.
    std::vector<bool> reaches(nodes.size(), false);
    for (const Output& o : g_.outputs()) to_output[o.value.id] = reaches[o.value.id] = true;
    for (std::uint32_t i = static_cast<std::uint32_t>(nodes.size()); i-- > 0;) {
      if (nodes[i].kind != NodeKind::op) continue;
      for (Value a : nodes[i].args) {
        reaches[a.id] = reaches[a.id] || reaches[i];
        to_output[a.id] = to_output[a.id] || (to_output[i] && !blocks_gradient(nodes[i].op));
      }
    }
    active_.assign(nodes.size(), false);
    for (std::uint32_t i = 0; i < nodes.size(); ++i) active_[i] = from_wrt[i] && to_output[i];
    for (std::uint32_t w : wrt_)
      EPIFUSE_CHECK(active_[w], "grad: the gradient of '{}' is zero everywhere: {}", leaf_name(w),
                    reaches[w] ? "it reaches the outputs only through step or relu_deriv, whose derivative is 0"
                                 : "it reaches no output");
  }

  // Adds `d` to node i's adjoint, kept as one sum per shape class: terms of
  // different classes must not meet before the reduction (a [N] term added to
  // an [M,N] one and then summed over the rows would count M times).
  void contribute(std::uint32_t i, Value d) {
    if (!active_[i]) return;
    Value& part = adjoint_[i][static_cast<std::size_t>(b().node(d).broadcast)];
    part = part.valid() ? b().add(part, d) : d;
  }

  // The adjoint summed over what node i's shape class broadcasts: a bias's
  // [N] gradient is the column sum of its [M,N] terms; an [M] value's the row
  // sum. Invalid when nothing contributed.
  Value reduce(std::uint32_t i, Broadcast cls) {
    Value total;
    auto plus = [&](Value v) { total = total.valid() ? b().add(total, v) : v; };
    for (std::size_t k = 0; k < 4; ++k) {
      const Value part = adjoint_[i][k];
      if (!part.valid()) continue;
      const auto have = static_cast<Broadcast>(k);
      if (cls == have || cls == Broadcast::full) {
        plus(part);
        continue;
      }
      const Value full = have == Broadcast::full ? part : b().expand(part);
      switch (cls) {
        case Broadcast::row: plus(b().col_sum(full)); break;
        case Broadcast::col:
          if (const Value s = row_sum_of(full); s.valid())
            plus(s);
          else if (std::find(wrt_.begin(), wrt_.end(), i) != wrt_.end())
            plus(b().row_sum(full));  // an asked-for gradient that is zero: the sum as it stands, not nothing
          break;
        default: throw UserError("grad: the gradient of a scalar value is not supported (make it a row or col vector)");
      }
    }
    return total;
  }

  // Note [Centered rows sum to zero]
  // A row of a - row_mean(a) sums to zero. The chain rule through layernorm's
  // mean reaches the row sum of its centered values times a per-row factor
  // (the variance's gradient): zero in exact arithmetic, rounding noise in
  // floats, and in the kernel a third reduction beside the two the gradient
  // needs, whose values stay live across the row (bf16 layernorm's backward at
  // 65,536 on r512v8x2c8s2t: 83 registers a thread against the hand-written
  // backward's 64). row_sum_of gives such a row sum as no value (zero), and
  // what adds, subtracts, scales or multiplies it passes that on.
  bool centered(Value v) const {
    const auto it = forward_of_.find(v.id);
    if (it == forward_of_.end()) return false;
    const Node& n = g_.nodes()[it->second];
    if (n.kind != NodeKind::op || n.op != OpKind::sub) return false;
    const Node& m = g_.node(n.args[1]);
    return m.kind == NodeKind::op && m.op == OpKind::row_mean && m.args[0].id == n.args[0].id &&
           g_.node(n.args[0]).broadcast == Broadcast::full;
  }

  // Note [Per-row factors out of row sums]
  // row_sum(u*c) = c*row_sum(u) for a per-row c, and a row sum of a sum is the
  // sum of the row sums. The chain rule through a norm gives row sums of terms
  // scaled by per-row values that themselves come from row sums (the variance's
  // gradient); summing the full factors instead makes every reduction of the
  // backward independent of the others: one stage of the row family, not two.
  // No value: zero (Note [Centered rows sum to zero]).
  Value row_sum_of(Value v) {
    if (auto it = row_sums_.find(v.id); it != row_sums_.end()) return it->second;
    Graph& B = b();
    const Node n = B.node(v);
    auto full = [&](Value x) { return B.node(x).broadcast == Broadcast::full; };
    auto per_row = [&](Value x) { return B.node(x).broadcast == Broadcast::col; };
    Value r;
    if (centered(v)) {
      r = Value{};
    } else if (n.kind == NodeKind::op && (n.op == OpKind::add || n.op == OpKind::sub) && full(n.args[0]) &&
               full(n.args[1])) {
      const Value x = row_sum_of(n.args[0]), y = row_sum_of(n.args[1]);
      r = !y.valid()                   ? x
          : x.valid()                  ? B.binary(n.op, x, y)
          : n.op == OpKind::add        ? y
                                       : B.scale(y, -1.0);
    } else if (n.kind == NodeKind::op && n.op == OpKind::scale) {
      if (const Value x = row_sum_of(n.args[0]); x.valid()) r = B.scale(x, n.alpha);
    } else if (n.kind == NodeKind::op && n.op == OpKind::mul && per_row(n.args[0]) && full(n.args[1])) {
      if (const Value x = row_sum_of(n.args[1]); x.valid()) r = mul(n.args[0], x);
    } else if (n.kind == NodeKind::op && n.op == OpKind::mul && full(n.args[0]) && per_row(n.args[1])) {
      if (const Value x = row_sum_of(n.args[0]); x.valid()) r = mul(x, n.args[1]);
    } else {
      r = B.row_sum(v);
    }
    row_sums_.emplace(v.id, r);
    return r;
  }

  // A value's name, else its op's (a composite's: softmax#8, not div#8) and its node.
  std::string value_label(std::uint32_t i) const {
    const Node& n = g_.nodes()[i];
    if (n.kind != NodeKind::op) return leaf_name(i);
    if (!n.name.empty()) return n.name;
    const Composite::Kind c = composites_[i].kind;
    const std::string_view op = c == Composite::softmax       ? "softmax"
                                : c == Composite::log_softmax ? "log_softmax"
                                                              : op_info(n.op).name;
    return fmt::format("{}#{}", op, i);
  }

  // Saves forward node i as an extra output of the forward; the backward reads it as an input.
  // `unnamed`: the name of an unnamed op's value, its op's by default.
  Value save(std::uint32_t i, std::string_view kind, DType dtype, std::string_view unnamed = {}) {
    const Node& n = g_.nodes()[i];
    // Named after the value, or its op (saved_row_max, saved_row_sum_1, saved_softmax, ...).
    std::string base = n.kind != NodeKind::op ? leaf_name(i)
                       : !n.name.empty()     ? n.name
                       : unnamed.empty()     ? std::string(op_info(n.op).name)
                                             : std::string(unnamed);
    auto taken = [&](const std::string& x) {
      return g_.find(x).valid() || b().find(x).valid() ||
             std::any_of(g_.outputs().begin(), g_.outputs().end(), [&](const Output& o) { return o.name == x; });
    };
    if (!to_save_) {  // the first pass: a short name, and no limit on outputs
      std::string name = fmt::format("saved_{}", i);
      for (int k = 1; taken(name); ++k) name = fmt::format("saved_{}_{}", i, k);
      saved_.push_back({name, std::string(kind), value_label(i), Value{i}, dtype});
      return b().input(name, dtype, n.broadcast);
    }
    std::string name = fmt::format("saved_{}", base);
    for (int k = 1; taken(name); ++k) name = fmt::format("saved_{}_{}", base, k);
    EPIFUSE_CHECK(name.size() <= limits::k_max_name_length,
                  "grad: the saved copy of '{}' would be named '{}', longer than the limit of {} characters",
                  names::excerpt(base), names::excerpt(name), limits::k_max_name_length);
    EPIFUSE_CHECK(g_.outputs().size() + saved_.size() < limits::k_max_outputs,
                  "grad: saving '{}' would give the forward more than the limit of {} outputs", value_label(i),
                  limits::k_max_outputs);
    saved_.push_back({name, std::string(kind), value_label(i), Value{i}, dtype});
    return b().input(name, dtype, n.broadcast);
  }

  // The forward value of node i, read by a derivative rule.
  Value fwd(std::uint32_t i) {
    reads_[i] = true;
    return obtain(i);
  }

  // The forward value of node i in the backward graph (Note [What the backward reads]).
  Value obtain(std::uint32_t i) {
    if (value_[i].valid()) return value_[i];
    const Node& n = g_.nodes()[i];
    Value v;
    const Output* out = full_output_of(i);
    if (out && n.kind == NodeKind::op && !is_row_reduction(n.op)) {
      // The forward's own output (rounded to its dtype, as PyTorch's saved
      // results are): read, not recomputed or saved again.
      v = read_output(i, *out);
    } else if (n.kind == NodeKind::input) {
      v = b().find(n.name);
      if (!v.valid()) v = b().input(n.name, n.dtype, n.broadcast);
    } else if (read_choice_[i] && composites_[i].kind != Composite::none) {
      // Note [Choices of what the backward reads]: the result saved, as PyTorch's softmax saves it.
      v = save(i, "softmax result", saved_dtype_,
               composites_[i].kind == Composite::softmax ? "softmax" : "log_softmax");
    } else if (n.kind == NodeKind::accumulator || (acc_dep_[i] && !is_row_reduction(n.op))) {
      if (!to_save_ || (*to_save_)[i]) {
        v = save(i, "pre-activation", saved_dtype_);
      } else {
        EPIFUSE_ASSERT(n.kind == NodeKind::op && !is_col_reduction(n.op), "'{}' is neither saved nor recomputable",
                       value_label(i));
        v = recompute(n);
      }
    } else if (is_row_reduction(n.op)) {
      v = save(i, "row statistic", DType::f32);
    } else {
      v = recompute(n);
    }
    value_[i] = v;
    forward_of_.emplace(v.id, i);
    return v;
  }

  // Forward op n again in the backward graph, on its operands' values.
  Value recompute(const Node& n) {
    std::vector<Value> args;
    for (Value a : n.args) args.push_back(obtain(a.id));
    return b().copy_op(n, args);
  }

  Value mul(Value a, Value c) { return b().mul(a, c); }

  // The first output storing node i as an [M,N] value, if any.
  const Output* full_output_of(std::uint32_t i) const {
    for (const Output& o : g_.outputs())
      if (o.value.id == i && g_.node(o.value).broadcast == Broadcast::full) return &o;
    return nullptr;
  }

  Value read_output(std::uint32_t i, const Output& o) {
    std::string name = o.name;
    auto taken = [&](const std::string& x) {
      const Value f = g_.find(x);
      return (f.valid() && g_.node(f).kind == NodeKind::input) || b().find(x).valid();
    };
    for (int k = 1; taken(name); ++k) name = fmt::format("{}_out{}", o.name, k == 1 ? "" : std::to_string(k));
    EPIFUSE_CHECK(name.size() <= limits::k_max_name_length, "grad: output '{}' would be read as '{}', longer than {} characters",
                  o.name, names::excerpt(name), limits::k_max_name_length);
    saved_.push_back({name, "output", value_label(i), Value{}, o.dtype});
    return b().input(name, o.dtype, Broadcast::full);
  }

  // The chain rule at node i: `d` is its adjoint, reduced to its shape class.
  void propagate(std::uint32_t i, Value d) {
    const Node& n = g_.nodes()[i];
    // Note [Softmax's closed form]: y (d - row_sum(d y)) and d - exp(y) row_sum(d),
    // read from y, which is often an output the backward has anyway, instead of
    // the chain rule through exp, row_sum and div (four more values and the
    // forward's row sum and max to rebuild them).
    if (const Composite& c = composites_[i]; c.kind != Composite::none) {
      Graph& B = b();
      const Value y = fwd(i);
      if (c.kind == Composite::softmax)
        contribute(c.x, mul(y, B.sub(d, B.row_sum(mul(d, y)))));
      else
        contribute(c.x, B.sub(d, mul(B.exp(y), B.row_sum(d))));
      return;
    }
    const std::uint32_t a = n.args[0].id;
    const std::uint32_t c = n.args.size() > 1 ? n.args[1].id : a;
    Graph& B = b();
    switch (n.op) {
      case OpKind::add: contribute(a, d); contribute(c, d); return;
      case OpKind::sub:
        contribute(a, d);
        if (active_[c] && !stabilizing_[c]) contribute(c, B.scale(d, -1.0));
        return;
      case OpKind::mul:
        if (a == c) {  // x*x: 2 x d, one product
          contribute(a, B.scale(mul(d, fwd(a)), 2.0));
          return;
        }
        if (active_[a]) contribute(a, mul(d, fwd(c)));
        if (active_[c]) contribute(c, mul(d, fwd(a)));
        return;
      case OpKind::div:
        if (active_[a]) contribute(a, B.div(d, fwd(c)));
        if (active_[c]) contribute(c, B.scale(B.div(mul(d, fwd(i)), fwd(c)), -1.0));
        return;
      case OpKind::max:
      case OpKind::min: {
        // Ties split the gradient evenly, as torch.maximum's backward does.
        if (active_[a]) contribute(a, mul(d, B.step(n.op == OpKind::max ? B.sub(fwd(a), fwd(c)) : B.sub(fwd(c), fwd(a)))));
        if (active_[c]) contribute(c, mul(d, B.step(n.op == OpKind::max ? B.sub(fwd(c), fwd(a)) : B.sub(fwd(a), fwd(c)))));
        return;
      }
      case OpKind::scale: contribute(a, B.scale(d, n.alpha)); return;
      case OpKind::add_scalar:
      case OpKind::cast:  // straight through, as a dtype conversion's gradient in PyTorch
      case OpKind::expand:
        contribute(a, d);
        return;
      case OpKind::relu: {
        const std::optional<std::uint32_t> same_sign = read_choice_[i] ? output_of_same_sign(g_, i) : std::nullopt;
        contribute(a, mul(d, B.relu_deriv(fwd(same_sign ? *same_sign : a))));
        return;
      }
      case OpKind::gelu_tanh: contribute(a, mul(d, B.unary(OpKind::gelu_tanh_deriv, fwd(a)))); return;
      case OpKind::gelu_erf: contribute(a, mul(d, B.unary(OpKind::gelu_erf_deriv, fwd(a)))); return;
      case OpKind::sigmoid: contribute(a, mul(d, B.unary(OpKind::sigmoid_deriv, fwd(a)))); return;
      case OpKind::silu: contribute(a, mul(d, B.unary(OpKind::silu_deriv, fwd(a)))); return;
      case OpKind::tanh: contribute(a, mul(d, B.unary(OpKind::tanh_deriv, fwd(a)))); return;
      case OpKind::exp: contribute(a, mul(d, fwd(i))); return;
      case OpKind::log: contribute(a, B.div(d, fwd(a))); return;
      case OpKind::rsqrt: {  // -0.5 a^-3/2 = -0.5 r^3
        const Value r = fwd(i);
        contribute(a, B.scale(mul(d, mul(r, mul(r, r))), -0.5));
        return;
      }
      case OpKind::dropout: {  // the same mask, regenerated: the forward's stream (§4)
        const Value args[] = {d};
        contribute(a, B.copy_op(n, args));
        return;
      }
      case OpKind::row_sum: contribute(a, d); return;
      case OpKind::row_mean: contribute(a, B.div_n(d)); return;
      case OpKind::row_max: {
        // To the row's maxima, split evenly among ties (torch.amax's rule):
        // step(x - max) is 1/2 at a maximum and 0 below it. The max is taken
        // again over the x the backward has, not read from the forward: a
        // backward that recomputes x may round it otherwise than the forward
        // did (another kernel, a fast function the forward's output dtype
        // allowed, the CPU against a GPU), and an x a rounding below its saved
        // max would leave a row with no maximum, 0/0, NaN gradients (found by
        // tests/fuzz/gpu_fuzz.cpp). Over its own x every row has one.
        const Value x = fwd(a);
        const Value at_max = B.step(B.sub(x, B.row_max(x)));
        contribute(a, B.div(mul(d, at_max), B.row_sum(at_max)));
        return;
      }
      case OpKind::col_sum: contribute(a, d); return;
      case OpKind::div_n: contribute(a, B.div_n(d)); return;
      case OpKind::step:
      case OpKind::relu_deriv: return;  // zero wherever defined (mark_active stops here)
      case OpKind::sigmoid_deriv: {  // s'(a) (1 - 2 s(a))
        const Value x = fwd(a);
        contribute(a, mul(d, mul(fwd(i), B.add_scalar(B.scale(B.sigmoid(x), -2.0), 1.0))));
        return;
      }
      case OpKind::tanh_deriv: {  // -2 tanh(a) tanh'(a)
        contribute(a, mul(d, B.scale(mul(B.tanh(fwd(a)), fwd(i)), -2.0)));
        return;
      }
      case OpKind::silu_deriv: {  // s'(a) (2 + a (1 - 2 s(a)))
        const Value x = fwd(a);
        const Value t = B.add_scalar(mul(x, B.add_scalar(B.scale(B.sigmoid(x), -2.0), 1.0)), 2.0);
        contribute(a, mul(d, mul(B.sigmoid_deriv(x), t)));
        return;
      }
      case OpKind::gelu_erf_deriv: {  // phi(a) (2 - a^2)
        const Value x = fwd(a);
        const Value x2 = mul(x, x);
        const Value phi = B.scale(B.exp(B.scale(x2, -0.5)), 0.3989422804014327);
        contribute(a, mul(d, mul(phi, B.add_scalar(B.scale(x2, -1.0), 2.0))));
        return;
      }
      case OpKind::gelu_tanh_deriv: {
        // g = x s(w), w = 2k(x + c x^3): g'' = s'(w) (2w' + x w'' + x w'^2 (1 - 2 s(w))),
        // w' = 2k(1 + 3c x^2), w'' = 12kc x.
        constexpr double k = 0.7978845608028654, cc = 0.044715;
        const Value x = fwd(a);
        const Value x2 = mul(x, x);
        const Value w = B.scale(B.add(x, B.scale(mul(x2, x), cc)), 2.0 * k);
        const Value w1 = B.scale(B.add_scalar(B.scale(x2, 3.0 * cc), 1.0), 2.0 * k);
        const Value w2 = B.scale(x, 12.0 * k * cc);
        const Value one_minus_2s = B.add_scalar(B.scale(B.sigmoid(w), -2.0), 1.0);
        const Value inner = B.add(B.add(B.scale(w1, 2.0), mul(x, w2)), mul(mul(x, mul(w1, w1)), one_minus_2s));
        contribute(a, mul(d, mul(B.sigmoid_deriv(w), inner)));
        return;
      }
    }
    EPIFUSE_ASSERT(false, "no derivative rule for {}", op_info(n.op).name);
  }

  const KernelSpec& spec_;
  const Graph& g_;
  KernelSpec out_;
  std::vector<int> users_;
  std::vector<std::vector<std::uint32_t>> user_list_;
  std::vector<bool> stabilizing_, active_;
  std::vector<Composite> composites_;  // by result node
  std::unordered_map<std::uint32_t, Value> row_sums_;  // backward value -> its row sum (none: zero)
  std::unordered_map<std::uint32_t, std::uint32_t> forward_of_;  // backward value -> the forward node it is
  std::vector<bool> acc_dep_;  // depends on an accumulator
  std::optional<std::vector<bool>> to_save_;
  // Per node: a ReLU whose rule reads an output, a softmax whose result is saved (choose_reads).
  std::vector<bool> read_choice_;
  std::vector<bool> reads_;  // read by a derivative rule
  std::vector<std::uint32_t> wrt_;
  std::vector<Value> value_;
  std::vector<std::array<Value, 4>> adjoint_;  // by Broadcast
  std::vector<Saved> saved_;
  DType saved_dtype_ = DType::f32;
};

// The backward with the choices of `read_choice` (choose_reads in saved_state.hpp).
GradResult differentiate(const KernelSpec& spec, const GradOptions& options, const std::vector<bool>& read_choice) {
  // Without an accumulator nothing is chosen: every value read is an input,
  // recomputed from inputs, an output or a row statistic.
  std::vector<bool> to_save(spec.graph.nodes().size(), false);
  const auto& nodes = spec.graph.nodes();
  if (std::any_of(nodes.begin(), nodes.end(), [](const Node& n) { return n.kind == NodeKind::accumulator; }))
    to_save = choose_saved(spec.graph,
                           Differentiator(spec, options, std::nullopt, read_choice).record_reads());
  return Differentiator(spec, options, std::move(to_save), read_choice).run();
}

}  // namespace

GradResult grad(const KernelSpec& spec, const GradOptions& options) {
  verify(spec);
  return choose_reads(spec, [&](const std::vector<bool>& read_choice) {
    return differentiate(spec, options, read_choice);
  });
}

}  // namespace epifuse
