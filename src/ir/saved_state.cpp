// What a chain's forward saves for its backward (docs/autodiff.md, "What the
// forward saves"): a GEMM chain's minimum cut, which ReLUs read an output and
// which softmax results are saved.
#include "ir/saved_state.hpp"

#include <algorithm>
#include <compare>
#include <cstdint>
#include <exception>
#include <optional>

#include <fmt/format.h>

#include "epifuse/errors.hpp"
#include "ir/composites.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

namespace {

// Note [Saving a minimum cut]
// The accumulators are not kept after the forward, so a value a rule reads
// that depends on one is either saved by the forward ([M,N], in the dtype of
// its first output) or recomputed in the backward by the forward's own
// elementwise ops from values that are. Saving every value read is simple and
// wasteful: SwiGLU silu(acc0)*acc1 reads s = silu(acc0), acc1 and acc0 (the
// rules of mul and silu) and would save three tensors, where acc0 and acc1
// give s again. What is saved is a vertex cut between the accumulators and
// the values read; the smallest one is chosen by trying every subset of the
// candidates (a chain has a handful; past k_max_candidates, each value read is
// saved, or the nearest values below it where it cannot be). The cost, compared
// in this order:
//   1. [M,N] tensors saved: the bytes the forward writes and the backward reads;
//   2. [M] and [N] tensors saved, the row statistics that the recomputation
//      reaches included;
//   3. saved values no rule reads: on a tie the value read is kept, so
//      bias+GELU saves acc + bias (cuBLASLt's aux), not acc;
//   4. ops the backward recomputes;
// then the first subset in a fixed order. What is never a candidate keeps its
// own policy: forward inputs are read again, [M,N] outputs read back, row
// reductions saved as [M] f32 statistics, dropouts regenerated from their
// stream; a value without an accumulator under it is recomputed from inputs.
// The chain without accumulators is not asked at all (autodiff.cpp).

// Subsets of at most this many candidates are all tried (2^16 evaluations of a
// walk over the graph: milliseconds).
constexpr std::size_t k_max_candidates = 16;

// How the backward may obtain a forward value; the order of the tests is
// Differentiator::fwd's.
enum class Source : std::uint8_t {
  free,        // a forward input read again, or an [M,N] output read back
  statistic,   // a row reduction: an [M] f32 statistic
  recompute,   // recomputed from its operands: nothing saved (no accumulator under it, or a dropout)
  either,      // an accumulator-dependent elementwise value: saved or recomputed
  saved_only,  // an accumulator or an accumulator-dependent col_sum: saved or not available
};

struct Cost {
  int full = 0;        // [M,N] tensors saved
  int small = 0;       // [M] and [N] tensors saved, statistics included
  int unread = 0;      // saved values no rule reads
  int recomputed = 0;  // ops recomputed
  auto operator<=>(const Cost&) const = default;
};

class SavedStateChooser {
 public:
  SavedStateChooser(const Graph& g, const std::vector<bool>& read) : g_(g), read_(read) {
    const auto& nodes = g.nodes();
    EPIFUSE_ASSERT(read.size() == nodes.size(), "choose_saved: {} read flags for {} nodes", read.size(), nodes.size());
    const std::vector<bool> acc = accumulator_dependent(g);
    std::vector<bool> full_output(nodes.size(), false);
    for (const Output& o : g.outputs()) full_output[o.value.id] = nodes[o.value.id].broadcast == Broadcast::full;
    source_.resize(nodes.size());
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const Node& n = nodes[i];
      const bool op = n.kind == NodeKind::op, reduction = op && is_row_reduction(n.op);
      if ((full_output[i] && op && !reduction) || n.kind == NodeKind::input)
        source_[i] = Source::free;
      else if (n.kind == NodeKind::accumulator || (acc[i] && is_col_reduction(n.op)))
        source_[i] = Source::saved_only;
      else if (reduction)
        source_[i] = Source::statistic;
      else if (acc[i] && n.op != OpKind::dropout)
        source_[i] = Source::either;
      else
        source_[i] = Source::recompute;
    }
  }

  std::vector<bool> choose() const {
    const std::vector<std::uint32_t> candidates = find_candidates();
    if (candidates.size() > k_max_candidates) return save_what_is_read();
    std::optional<Cost> best;
    std::vector<bool> best_set, set(g_.nodes().size());
    for (std::uint32_t mask = 0; mask < (1u << candidates.size()); ++mask) {
      for (std::size_t k = 0; k < candidates.size(); ++k) set[candidates[k]] = (mask >> k) & 1u;
      const std::optional<Cost> c = cost_of(set);
      if (c && (!best || *c < *best)) {
        best = c;
        best_set = set;
      }
    }
    // Saving every candidate is always enough: nothing stops the walk but a saved value.
    EPIFUSE_ASSERT(best.has_value(), "choose_saved: no set of saved values gives every value read");
    return best_set;
  }

 private:
  // The saveable values a recomputation of a value read may reach, in node order.
  std::vector<std::uint32_t> find_candidates() const {
    const auto& nodes = g_.nodes();
    std::vector<bool> seen(nodes.size(), false);
    std::vector<std::uint32_t> stack, out;
    for (std::uint32_t i = 0; i < nodes.size(); ++i)
      if (read_[i]) stack.push_back(i);
    while (!stack.empty()) {
      const std::uint32_t v = stack.back();
      stack.pop_back();
      if (seen[v]) continue;
      seen[v] = true;
      const Source s = source_[v];
      if (s == Source::either || s == Source::saved_only) out.push_back(v);
      if (s == Source::either || s == Source::recompute)
        for (Value a : nodes[v].args) stack.push_back(a.id);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // What obtaining every value read costs when `saved` is saved; nothing when
  // some value read needs an accumulator (or col_sum) that is not.
  std::optional<Cost> cost_of(const std::vector<bool>& saved) const {
    const auto& nodes = g_.nodes();
    Cost c;
    std::vector<bool> seen(nodes.size(), false);
    std::vector<std::uint32_t> stack;
    for (std::uint32_t i = 0; i < nodes.size(); ++i)
      if (read_[i]) stack.push_back(i);
    auto count_saved = [&](std::uint32_t v) {
      ++(nodes[v].broadcast == Broadcast::full ? c.full : c.small);
      c.unread += !read_[v];
    };
    while (!stack.empty()) {
      const std::uint32_t v = stack.back();
      stack.pop_back();
      if (seen[v]) continue;
      seen[v] = true;
      switch (source_[v]) {
        case Source::free: continue;
        case Source::statistic: count_saved(v); continue;
        case Source::saved_only:
          if (!saved[v]) return std::nullopt;
          count_saved(v);
          continue;
        case Source::either:
          if (saved[v]) {
            count_saved(v);
            continue;
          }
          break;
        case Source::recompute: break;
      }
      ++c.recomputed;
      for (Value a : nodes[v].args) stack.push_back(a.id);
    }
    return c;
  }

  // Past k_max_candidates: each value read is saved where it can be, and
  // otherwise (a dropout) recomputed from the nearest saveable values below it.
  std::vector<bool> save_what_is_read() const {
    const auto& nodes = g_.nodes();
    std::vector<bool> saved(nodes.size(), false), seen(nodes.size(), false);
    std::vector<std::uint32_t> stack;
    for (std::uint32_t i = 0; i < nodes.size(); ++i)
      if (read_[i]) stack.push_back(i);
    while (!stack.empty()) {
      const std::uint32_t v = stack.back();
      stack.pop_back();
      if (seen[v]) continue;
      seen[v] = true;
      const Source s = source_[v];
      if (s == Source::saved_only || (s == Source::either && read_[v]))
        saved[v] = true;
      else if (s == Source::either || s == Source::recompute)
        for (Value a : nodes[v].args) stack.push_back(a.id);
    }
    return saved;
  }

  const Graph& g_;
  const std::vector<bool>& read_;
  std::vector<Source> source_;
};

// Bytes an element of the [M,N] tensors the forward writes beyond its own
// outputs and the backward reads, its upstream gradients aside.
std::size_t full_tensor_bytes(const KernelSpec& spec, const GradResult& r) {
  std::size_t bytes = 0;
  const auto& outs = r.forward.graph.outputs();
  for (std::size_t k = spec.graph.outputs().size(); k < outs.size(); ++k)
    if (r.forward.graph.node(outs[k].value).broadcast == Broadcast::full) bytes += size_of(outs[k].dtype);
  const Graph& b = r.backward.graph;
  for (Value v : b.inputs()) {
    const Node& n = b.node(v);
    const bool upstream = std::any_of(spec.graph.outputs().begin(), spec.graph.outputs().end(),
                                      [&](const Output& o) { return n.name == fmt::format("d{}", o.name); });
    if (n.broadcast == Broadcast::full && !upstream) bytes += size_of(n.dtype);
  }
  return bytes;
}

// Note [Choices of what the backward reads]
// At two kinds of node the backward may obtain what a rule reads two ways:
//   - a ReLU with an output of its sign (Note [ReLU's derivative from an
//     output]) reads that output or its operand. Reading the output saves the
//     operand where nothing else needs it (a GEMM's pre-activation), and reads
//     one more tensor where something does (a second output of the same
//     pre-activation, which the backward reads anyway);
//   - a softmax or log_softmax whose result no [M,N] output stores (softmax
//     then dropout: attention's probabilities) has its closed form read the
//     result, which the forward saves ([M,N], in the dtype of its first
//     output, as PyTorch saves softmax's result) or the backward recomputes
//     from the inputs below it and the saved row max and sum. With a full
//     mask the bytes are equal (the result written and read once against x
//     and the mask read again); with a row mask or none, recomputing moves
//     fewer.
// Every choice is tried, up to k_max_read_choices nodes (past them, each such
// node takes the choice a tie prefers, below), and the backward whose
// forward writes and backward reads the fewest bytes of [M,N] tensors is kept.
// A tie goes to the choice that more nodes prefer, then to the first (the
// choices as a binary number, the first node its lowest bit). A ReLU prefers
// the output: an output is alive for the next layer anyway, where an input is
// kept for the backward alone. A softmax prefers its result saved when that
// is 16-bit and recomputed in f32, as measured (H200, 2026-11-28, attention's
// softmax then dropout with a full mask, the forward's extra write charged to
// the backward, M*N = 2^27, rows of 1,024 to 262,144): in bf16 recomputing
// (the exp, the ops below it, the quotient) is what bounds the backward, and
// saving took 0.77-0.83x its time; in f32 the bytes bound both, and saving
// took 1.03-1.07x (docs/perf/backward.md).
constexpr std::size_t k_max_read_choices = 4;

// Node v is stored by an output, as an [M,N] tensor.
bool is_full_output(const Graph& g, std::uint32_t v) {
  return g.node(Value{v}).broadcast == Broadcast::full &&
         std::any_of(g.outputs().begin(), g.outputs().end(), [&](const Output& o) { return o.value.id == v; });
}

// The nodes where the backward may obtain a value two ways, in node order: a
// ReLU with an output of its sign (its rule reads that output, or its
// operand) and a softmax or log_softmax whose result no [M,N] output stores
// (the forward saves it, or the backward recomputes it from the inputs and
// the row statistics).
std::vector<std::uint32_t> read_choices(const Graph& g) {
  const auto& nodes = g.nodes();
  const std::vector<Composite> composites = find_composites(g);
  std::vector<std::uint32_t> out;
  for (std::uint32_t i = 0; i < nodes.size(); ++i) {
    const bool relu = nodes[i].kind == NodeKind::op && nodes[i].op == OpKind::relu && output_of_same_sign(g, i);
    if (relu || (composites[i].kind != Composite::none && !is_full_output(g, i))) out.push_back(i);
  }
  return out;
}

}  // namespace

std::vector<bool> accumulator_dependent(const Graph& g) {
  const auto& nodes = g.nodes();
  std::vector<bool> out(nodes.size(), false);
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    out[k] = nodes[k].kind == NodeKind::accumulator;
    for (Value a : nodes[k].args) out[k] = out[k] || out[a.id];
  }
  return out;
}

std::vector<bool> choose_saved(const Graph& g, const std::vector<bool>& read) {
  return SavedStateChooser(g, read).choose();
}

// Note [ReLU's derivative from an output]
// relu'(z) = [z > 0] = [relu(z) > 0]: PyTorch's ReLU backward reads its
// result. The result's sign survives an op that scales it by a positive
// factor: a positive `scale`, a `cast` (rounded as the output is, like a
// saved copy), and a dropout where it keeps the element; where it drops
// one, the gradient that reaches the ReLU is the regenerated mask's zero
// (or the NaN of a dropped inf), whatever the derivative. So when the ReLU,
// or the one user of the ReLU, of that user and so on through such ops, is
// an [M,N] output, the rule may read that output back instead of the ReLU's
// operand. grad() takes it where that moves no more bytes (Note [Choices of
// what the backward reads]): bias + ReLU (+ dropout) on a GEMM then saves nothing
// where it saved the pre-activation. A 1-bit mask would be the answer for a
// ReLU no output carries the sign of; the IR has no packed dtype.
std::optional<std::uint32_t> output_of_same_sign(const Graph& g, std::uint32_t relu) {
  const auto& nodes = g.nodes();
  std::vector<int> uses;
  std::vector<std::vector<std::uint32_t>> user_list;
  count_users(g, uses, user_list);
  for (std::uint32_t v = relu;;) {
    if (is_full_output(g, v)) return v;
    const std::vector<std::uint32_t>& list = user_list[v];
    if (uses[v] != 1 || list.size() != 1) return std::nullopt;
    const Node& n = nodes[list.front()];
    const bool keeps_sign = n.kind == NodeKind::op && n.args.size() == 1 && n.args[0].id == v &&
                            (n.op == OpKind::dropout || n.op == OpKind::cast ||
                             (n.op == OpKind::scale && n.alpha > 0.0));
    if (!keeps_sign) return std::nullopt;
    v = list.front();
  }
}

GradResult choose_reads(const KernelSpec& spec,
                        const std::function<GradResult(const std::vector<bool>&)>& differentiate) {
  const auto& nodes = spec.graph.nodes();
  const std::vector<std::uint32_t> at = read_choices(spec.graph);
  // Per node, whether a tie prefers the output read or the result saved: a
  // softmax's result is saved in the dtype of the first output (autodiff.cpp).
  const bool narrow = size_of(spec.graph.outputs().front().dtype) < 4;
  auto prefers = [&](std::uint32_t i) { return nodes[i].op == OpKind::relu || narrow; };
  if (at.size() > k_max_read_choices) {
    std::vector<bool> preferred(nodes.size(), false);
    for (std::uint32_t i : at) preferred[i] = prefers(i);
    return differentiate(preferred);
  }
  std::optional<GradResult> best;
  std::size_t best_bytes = 0;
  int best_preferred = 0;
  std::exception_ptr first_error;
  for (std::uint32_t mask = 0; mask < (1u << at.size()); ++mask) {
    std::vector<bool> choice(nodes.size(), false);
    int preferred = 0;  // nodes whose choice is the one a tie prefers
    for (std::size_t k = 0; k < at.size(); ++k) {
      choice[at[k]] = (mask >> k) & 1u;
      preferred += choice[at[k]] == prefers(at[k]);
    }
    try {
      GradResult r = differentiate(choice);
      const std::size_t bytes = full_tensor_bytes(spec, r);
      if (!best || bytes < best_bytes || (bytes == best_bytes && preferred > best_preferred)) {
        best = std::move(r);
        best_bytes = bytes;
        best_preferred = preferred;
      }
    } catch (const UserError&) {  // a limit one choice passes and another does not
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (!best) std::rethrow_exception(first_error);
  return std::move(*best);
}

}  // namespace epifuse
