// Composite detection for grad(spec) (composites.hpp).
#include "ir/composites.hpp"

#include <algorithm>
#include <optional>

#include "ir/op_table.hpp"

namespace epifuse {

std::vector<bool> stabilizing_maxima(const Graph& g, const std::vector<int>& users,
                                     const std::vector<std::vector<std::uint32_t>>& user_list,
                                     std::vector<Composite>& roots) {
  const auto& nodes = g.nodes();
  std::vector<bool> out(nodes.size(), false);
  roots.assign(nodes.size(), Composite{});
  auto is = [&](std::uint32_t i, OpKind op) { return nodes[i].kind == NodeKind::op && nodes[i].op == op; };
  auto only_user = [&](std::uint32_t i) -> std::optional<std::uint32_t> {
    if (users[i] != 1 || user_list[i].size() != 1) return std::nullopt;
    return user_list[i][0];
  };
  for (std::uint32_t m = 0; m < nodes.size(); ++m) {
    if (!is(m, OpKind::row_max)) continue;
    const std::uint32_t x = nodes[m].args[0].id;
    auto s = only_user(m);
    if (!s || !is(*s, OpKind::sub) || nodes[*s].args[0].id != x || nodes[*s].args[1].id != m) continue;
    // softmax: e = exp(s), S = row_sum(e), y = e / S.
    if (auto e = only_user(*s); e && is(*e, OpKind::exp) && users[*e] == 2 && user_list[*e].size() == 2) {
      const auto& eu = user_list[*e];
      const std::uint32_t S = is(eu[0], OpKind::row_sum) ? eu[0] : eu[1];
      const std::uint32_t y = S == eu[0] ? eu[1] : eu[0];
      auto sy = only_user(S);
      if (is(S, OpKind::row_sum) && is(y, OpKind::div) && nodes[y].args[0].id == *e && nodes[y].args[1].id == S &&
          sy && *sy == y) {
        out[m] = true;
        roots[y] = {Composite::softmax, x};
      }
      continue;
    }
    // log_softmax: e = exp(s), S = row_sum(e), l = log(S), y = s - l.
    if (users[*s] != 2 || user_list[*s].size() != 2) continue;
    const auto& su = user_list[*s];
    const std::uint32_t e = is(su[0], OpKind::exp) ? su[0] : su[1];
    const std::uint32_t y = e == su[0] ? su[1] : su[0];
    if (!is(e, OpKind::exp) || !is(y, OpKind::sub) || nodes[y].args[0].id != *s) continue;
    auto S = only_user(e);
    if (!S || !is(*S, OpKind::row_sum)) continue;
    auto l = only_user(*S);
    if (!l || !is(*l, OpKind::log) || nodes[y].args[1].id != *l) continue;
    auto ly = only_user(*l);
    if (ly && *ly == y) {
      out[m] = true;
      roots[y] = {Composite::log_softmax, x};
    }
  }
  return out;
}

void count_users(const Graph& g, std::vector<int>& users, std::vector<std::vector<std::uint32_t>>& user_list) {
  const auto& nodes = g.nodes();
  users.assign(nodes.size(), 0);
  user_list.assign(nodes.size(), {});
  for (std::uint32_t i = 0; i < nodes.size(); ++i)
    for (Value a : nodes[i].args) {
      ++users[a.id];
      if (std::find(user_list[a.id].begin(), user_list[a.id].end(), i) == user_list[a.id].end())
        user_list[a.id].push_back(i);
    }
  for (const Output& o : g.outputs()) ++users[o.value.id];
}

std::vector<Composite> find_composites(const Graph& g) {
  std::vector<int> users;
  std::vector<std::vector<std::uint32_t>> user_list;
  count_users(g, users, user_list);
  std::vector<Composite> roots;
  stabilizing_maxima(g, users, user_list, roots);
  return roots;
}

}  // namespace epifuse
