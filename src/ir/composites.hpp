#pragma once
// The softmax and log_softmax composites found in a graph by their exact
// shape, for grad(spec)'s closed-form rules (autodiff.cpp).
#include <cstdint>
#include <vector>

#include "epifuse/graph.hpp"

namespace epifuse {

// The softmax and log_softmax composites subtract the row max only to keep
// exp from overflowing: their value does not depend on it, so its gradient is
// exactly 0 and no rule is needed (the generic one would be a row reduction
// of terms that cancel). Found by the composites' exact shape
// (Graph::softmax, Graph::log_softmax) with no other user of their parts.
// A softmax or log_softmax found: its result node and its operand.
struct Composite {
  enum Kind : std::uint8_t { none, softmax, log_softmax } kind = none;
  std::uint32_t x = 0;
};

/// Marks the row maxima that only stabilize a softmax or log_softmax (their
/// gradient is exactly 0) and records each composite at its result node in
/// `roots`. `users` counts each node's uses (as an operand, once per operand, and as an output), `user_list`
/// lists the ops among them.
std::vector<bool> stabilizing_maxima(const Graph& g, const std::vector<int>& users,
                                     const std::vector<std::vector<std::uint32_t>>& user_list,
                                     std::vector<Composite>& roots);

/// Each node's uses as above: `users` counts them (as an operand, once per
/// operand, and as an output), `user_list` lists the ops among them.
void count_users(const Graph& g, std::vector<int>& users, std::vector<std::vector<std::uint32_t>>& user_list);

/// The composites of `g`, recorded at their result nodes.
std::vector<Composite> find_composites(const Graph& g);

}  // namespace epifuse
