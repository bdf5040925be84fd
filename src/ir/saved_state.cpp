// Which accumulator-dependent values a GEMM chain's forward saves
// (docs/autodiff.md, "What the forward saves").
#include "ir/saved_state.hpp"

#include <algorithm>
#include <compare>
#include <cstdint>
#include <optional>

#include "epifuse/errors.hpp"
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

}  // namespace epifuse
