#pragma once
/// KernelSpec: the graph plus the mainloop that produces its accumulator.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "epifuse/graph.hpp"

namespace epifuse {

enum class MainloopKind : std::uint8_t { elementwise, gemm, dual_gemm };
std::string_view to_string(MainloopKind);

/// Which template produces the accumulator and how its operands are stored.
enum class GemmMath : std::uint8_t { exact, tf32 };
std::string_view to_string(GemmMath);

struct Mainloop {
  MainloopKind kind = MainloopKind::elementwise;
  DType a = DType::f16;            ///< gemm kinds: A operand dtype
  DType b = DType::f16;            ///< gemm kinds: B (B0, B1) operand dtype
  Layout a_layout = Layout::row;
  Layout b_layout = Layout::row;
  /// f32 operands: `exact` fp32 products (FFMA, PyTorch's default) or `tf32`
  /// (operands rounded to tf32 on the tensor cores, torch's allow_tf32).
  GemmMath math = GemmMath::exact;
  friend bool operator==(const Mainloop&, const Mainloop&) = default;
};

/// docs/design.md §3 precision policy.
enum class Precision : std::uint8_t { accurate, fast };

/// Problem shape: elementwise uses M, N (leading dims folded into M); GEMM kinds M, N, K.
/// GEMM kinds may also give an operand's leading dimension (docs/strided-batched.md):
/// elements between its rows as stored (A row-major: K columns, col-major: M; B
/// row-major: N, col-major: K), at least that many. 0, or exactly that many, is the
/// dense operand and its kernel; any other ld is a strided variant (the flag, not the
/// value, is in the cache key: `gemm_shape_class`).
///
/// A GEMM chain may run `batch` independent problems of this shape in one launch
/// (docs/strided-batched.md, "Built: batched GEMM"): operand i of batch b starts
/// b x its batch stride elements after batch 0's (Shape::dense_batch, the default:
/// the operand's own stored size, batches back to back; 0: one operand shared by
/// every batch). Full [M,N] inputs and outputs are batched back to back (stride
/// M*N); row [N], column [M] and scalar inputs are shared. batch 1 is the
/// unbatched kernel; batch > 1 is a variant ("/bat" in `gemm_shape_class`).
///
/// A chain's full [M,N] inputs and outputs may be strided too, in every family
/// (docs/strided-batched.md, "Built: strided epilogue tensors" and "Built:
/// strided tensors in the elementwise and row families"): `ld_inputs[i]` is
/// the leading dimension of the graph's input i, `ld_outputs[j]` of its
/// output j (declaration order, the order they bind in after any GEMM
/// operands): elements between rows, at least N. 0, N, or an index past the
/// vector's end is dense; any other ld is a strided variant ("/ld_in<i>",
/// "/ld_out<j>" in the shape class: `tensor_ld_flags`; the flag, not the
/// value, is in the cache key).
struct Shape {
  static constexpr std::int64_t dense_batch = -1;  ///< a batch stride: the operand's stored size
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t lda = 0, ldb = 0, ldb1 = 0;  ///< A, B (a dual GEMM's B0), a dual GEMM's B1; 0: dense
  std::int64_t batch = 1;                   ///< problems in one launch (GEMM kinds)
  /// Elements between batches of A, B (B0), B1: dense_batch, 0 (shared) or at least the operand's size.
  std::int64_t batch_stride_a = dense_batch, batch_stride_b = dense_batch, batch_stride_b1 = dense_batch;
  std::vector<std::int64_t> ld_inputs, ld_outputs;  ///< full [M,N] inputs, outputs; 0 or absent: dense
  friend bool operator==(const Shape&, const Shape&) = default;
};

struct KernelSpec {
  std::string name;                ///< for display and kernel naming only
  Mainloop mainloop;
  Graph graph;
  Precision precision = Precision::accurate;
  /// Optional default problem shape (JSON "shape"); not part of the signature.
  std::optional<Shape> default_shape;
};

/// Validates a spec: the graph (verify), leaves matching the mainloop
/// (elementwise: no accumulators and a full input; gemm: acc only;
/// dual_gemm: acc0 and acc1), and that no input takes a GEMM operand's name
/// (`a`, `b`, `b0`, `b1` are bound to the mainloop's operands).
void verify(const KernelSpec& spec);

/// Validates a shape against a spec: positive, K present for GEMM kinds, and no
/// dimension absurd (each <= 2^40, M*N <= 2^48); an operand's ld (GEMM kinds
/// only, B1 a dual GEMM's only) at least its rows' length, UserError naming it;
/// a chain tensor's ld (full [M,N] tensors only, unbatched only) at least N,
/// UserError naming the tensor;
/// a batch count of at least 1 (above 1 GEMM kinds only, full outputs only) and
/// batch strides that keep batches apart (UserError naming the operand).
void verify_shape(const KernelSpec& spec, const Shape& shape);

/// GEMM operand `operand` (0: A, 1: B or B0, 2: B1) as stored: its rows' length
/// when dense (A row-major K, col-major M; B row-major N, col-major K), the ld
/// the shape gives it (that length where it gives 0), and whether it is strided
/// (an ld other than 0 and that length: a kernel variant with an ld field).
std::int64_t gemm_operand_extent(const Mainloop& mainloop, const Shape& shape, int operand);
std::int64_t gemm_operand_ld(const Mainloop& mainloop, const Shape& shape, int operand);
bool gemm_operand_strided(const Mainloop& mainloop, const Shape& shape, int operand);

/// A chain's full [M,N] input `i` or output `j` (the graph's declaration
/// order) as stored: its ld (N where the shape gives 0 or none), and whether
/// it is strided (an ld other than 0 and N: a kernel variant with an
/// `ld_in<i>` or `ld_out<j>` field).
std::int64_t input_ld(const Shape& shape, std::size_t i);
std::int64_t output_ld(const Shape& shape, std::size_t j);
bool input_strided(const Shape& shape, std::size_t i);
bool output_strided(const Shape& shape, std::size_t j);
/// Whether any of the shape's epilogue tensors is strided.
bool epilogue_strided(const Shape& shape);

/// GEMM operand `operand` as one batch stores it: its stored rows x its ld
/// (elements); and its batch stride resolved (that size for Shape::dense_batch).
std::int64_t gemm_operand_size(const Mainloop& mainloop, const Shape& shape, int operand);
std::int64_t gemm_operand_batch_stride(const Mainloop& mainloop, const Shape& shape, int operand);

/// Canonical printer: one line per node, with names. Used by `epifuse validate`.
std::string print(const KernelSpec& spec);

/// Canonical signature: like print() but with inputs numbered in declaration
/// order and values numbered by position, so renaming inputs, values or
/// outputs does not change it; structure, dtypes and attributes do.
std::string signature(const KernelSpec& spec);

/// The same canonical content as signature() in a compact binary encoding
/// (node kinds, ops, dtypes, canonical operand indices, attribute bits): two
/// specs have equal encodings exactly when their signatures are equal. Cache
/// keys use it because it is built on every lookup (about 10x faster).
std::string signature_bytes(const KernelSpec& spec);

}  // namespace epifuse
