// Note [Overlapping bindings] (bindings_overlap.hpp).
#include "runtime/bindings_overlap.hpp"

#include <fmt/format.h>

#include "ir/names.hpp"

namespace epifuse {

namespace {

// The bytes a binding covers: `rows` rows `pitch` bytes apart, each `width`
// bytes from its start, `batches` times `batch_bytes` apart; [begin, end) is
// the first byte to one past the last.
struct Extent {
  std::uint64_t begin = 0, end = 0;
  std::uint64_t rows = 1, pitch = 0, width = 0;
  std::uint64_t batches = 1, batch_bytes = 0;
  bool full = false;     // a chain's [M,N] tensor (not a GEMM operand, not a vector)
  bool operand = false;  // a GEMM operand
};

Extent extent(std::uint64_t ptr, std::uint64_t rows, std::uint64_t ld, std::uint64_t width, std::uint64_t elem,
              std::uint64_t batches = 1, std::uint64_t batch_stride = 0) {
  Extent e;
  e.rows = rows;
  e.pitch = ld * elem;
  e.width = width * elem;
  e.batches = batch_stride ? batches : 1;
  e.batch_bytes = batch_stride * elem;
  e.begin = ptr;
  e.end = ptr + (e.batches - 1) * e.batch_bytes + (rows - 1) * e.pitch + e.width;
  return e;
}

// Whether two unbatched tensors of one row pitch share a byte: row r of `b`
// starts q rows and s bytes after row 0 of `a` (b.begin - a.begin = q*pitch + s),
// so it covers bytes [s, s + b.width) of a's row r + q and, past the pitch, the
// start of row r + q + 1.
bool rows_meet(const Extent& a, const Extent& b) {
  if (a.begin > b.begin) return rows_meet(b, a);
  const std::uint64_t d = b.begin - a.begin, q = d / a.pitch, s = d % a.pitch;
  const bool same_row = s < a.width && q < a.rows;
  const bool next_row = s + b.width > a.pitch && q + 1 < a.rows;
  return same_row || next_row;
}

bool meet(const Extent& a, const Extent& b) {
  if (a.begin == a.end || b.begin == b.end) return false;  // no bytes
  if (a.end <= b.begin || b.end <= a.begin) return false;
  if (a.batches == 1 && b.batches == 1 && a.rows > 1 && b.rows > 1 && a.pitch == b.pitch && a.pitch > 0)
    return rows_meet(a, b);
  return true;  // their ranges meet: no finer test
}

}  // namespace

// Extents are made where they are compared, not kept: the launch path
// allocates nothing (tools/perf/launch_dry.cpp --check).
std::string overlapping_bindings(const KernelSpec& spec, const Shape& shape, const DeviceBindings& b,
                                 const std::vector<std::string>& input_names,
                                 const std::vector<std::string>& output_names) {
  const Mainloop& ml = spec.mainloop;
  const Graph& g = spec.graph;
  const auto m = static_cast<std::uint64_t>(shape.m), n = static_cast<std::uint64_t>(shape.n);
  const auto batches = static_cast<std::uint64_t>(shape.batch);
  const std::size_t operands = names::gemm_operand_names(ml.kind).size();
  // A chain tensor of broadcast `bc`: full [M,N] rows ld apart (batched back to
  // back), a row [N] or column [M] vector, a scalar; vectors are shared by batches.
  auto chain_tensor = [&](std::uint64_t ptr, Broadcast bc, std::uint64_t elem, std::int64_t ld) {
    switch (bc) {
      case Broadcast::full: {
        Extent e = extent(ptr, m, static_cast<std::uint64_t>(ld), n, elem, batches, m * n);
        e.full = true;
        return e;
      }
      case Broadcast::row: return extent(ptr, 1, n, n, elem);
      case Broadcast::col: return extent(ptr, 1, m, m, elem);
      case Broadcast::scalar: return extent(ptr, 1, 1, 1, elem);
    }
    return Extent{};
  };
  auto input = [&](std::size_t i) {
    if (i >= operands) {
      const std::size_t k = i - operands;
      const Node& node = g.node(g.inputs()[k]);
      return chain_tensor(b.inputs[i], node.broadcast, size_of(node.dtype), input_ld(shape, k));
    }
    const int op = static_cast<int>(i);
    const auto row = static_cast<std::uint64_t>(gemm_operand_extent(ml, shape, op));
    const auto ld = static_cast<std::uint64_t>(gemm_operand_ld(ml, shape, op));
    Extent e;
    if (row > 0 && ld > 0) {
      const auto rows = static_cast<std::uint64_t>(gemm_operand_size(ml, shape, op)) / ld;
      e = extent(b.inputs[i], rows, ld, row, size_of(i == 0 ? ml.a : ml.b), batches,
                 static_cast<std::uint64_t>(gemm_operand_batch_stride(ml, shape, op)));
    }
    e.operand = true;
    return e;
  };
  auto output = [&](std::size_t j) {
    const Output& o = g.outputs()[j];
    return chain_tensor(b.outputs[j], g.node(o.value).broadcast, size_of(o.dtype), output_ld(shape, j));
  };
  for (std::size_t j = 0; j < b.outputs.size(); ++j) {
    const Extent o = output(j);
    for (std::size_t i = 0; i < b.inputs.size(); ++i) {
      const Extent x = input(i);
      if (!meet(o, x)) continue;
      const bool in_place = o.full && x.full && o.begin == x.begin && o.pitch == x.pitch && o.width == x.width;
      if (in_place) continue;
      return fmt::format("output '{}' shares memory with {} '{}'{}: the kernel would read it while writing it; "
                         "give the output memory of its own{}",
                         output_names[j], x.operand ? "GEMM operand" : "input", input_names[i],
                         x.full && o.full ? " (not the same view of it)" : "",
                         x.full && o.full ? " (or exactly that input's view: in place)" : "");
    }
    for (std::size_t k = 0; k < j; ++k)
      if (meet(o, output(k)))
        return fmt::format("outputs '{}' and '{}' share memory: both would be written; give each memory of its own",
                           output_names[k], output_names[j]);
  }
  return "";
}

}  // namespace epifuse
