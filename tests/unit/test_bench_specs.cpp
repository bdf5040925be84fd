// What `epifuse bench` builds for a GEMM chain's baselines, checked without a
// GPU: the derived specs (dropout removed, the accumulator read from memory,
// one kernel per op) against the reference evaluator, cuBLASLt epilogue
// detection, and the row-major -> column-major operand mapping emulated on
// the CPU for all four layouts (docs/bench.md).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "bench/bench_specs.hpp"
#include "bench/cublaslt_baseline.hpp"
#include "epifuse/autodiff.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/dgrad.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"
#include "epifuse/reference.hpp"

using namespace epifuse;

namespace {

// y = dropout(act(acc + bias)) in `dt`, as examples/chains/gemm_bias_relu_dropout.json.
KernelSpec gemm_bias_act(DType dt, OpKind act, bool dropout, bool bias_first = false) {
  KernelSpec s;
  s.mainloop = {MainloopKind::gemm, dt, dt, Layout::row, Layout::row};
  Graph& g = s.graph;
  Value acc = g.accumulator();
  Value bias = g.input("bias", dt, Broadcast::row);
  Value v = g.unary(act, bias_first ? g.add(bias, acc) : g.add(acc, bias));
  if (dropout) v = g.dropout(v, 0.25);
  g.output("y", v, dt);
  return s;
}

KernelSpec plain_gemm(DType operands, DType out, Layout a = Layout::row, Layout b = Layout::row) {
  KernelSpec s;
  s.mainloop = {MainloopKind::gemm, operands, operands, a, b};
  s.graph.output("y", s.graph.accumulator(), out);
  return s;
}

void check_same_values(const HostTensor& got, const HostTensor& want) {
  REQUIRE(got.dtype == want.dtype);
  REQUIRE(got.shape == want.shape);
  CHECK(got.bytes == want.bytes);
}

}  // namespace

TEST_CASE("without_dropout: the chain with identity for dropout, same values as the chain written without it") {
  const KernelSpec with = gemm_bias_act(DType::f32, OpKind::relu, true);
  const auto without = without_dropout(with);
  REQUIRE(without);
  CHECK(without->graph.dropout_count() == 0);
  CHECK(without->mainloop == with.mainloop);
  CHECK(signature(*without) == signature(gemm_bias_act(DType::f32, OpKind::relu, false)));
  const Shape shape{5, 12, 7};
  const TensorMap in = make_inputs(with, shape, 3);
  check_same_values(evaluate(*without, shape, in, {}).at("y"),
                    evaluate(gemm_bias_act(DType::f32, OpKind::relu, false), shape, in, {}).at("y"));
  CHECK_NOTHROW(emit_kernel(*without, {128, 128, 64}));

  // A dropout of a vector is what made this output full: no variant without it.
  KernelSpec vec;
  Value x = vec.graph.input("x", DType::f16);
  Value b = vec.graph.input("b", DType::f16, Broadcast::row);
  vec.graph.output("y", vec.graph.dropout(b, 0.5), DType::f16);
  vec.graph.output("z", x, DType::f16);
  CHECK_FALSE(without_dropout(vec));
}

TEST_CASE("without_dropout keeps add_scalar's constant (rmsnorm's eps)") {
  KernelSpec with;
  Graph& g = with.graph;
  g.output("y", g.dropout(g.rmsnorm(g.input("x", DType::f32), g.input("w", DType::f32, Broadcast::row), 0.25), 0.5),
           DType::f32);
  KernelSpec plain;
  plain.graph.output("y", plain.graph.rmsnorm(plain.graph.input("x", DType::f32),
                                              plain.graph.input("w", DType::f32, Broadcast::row), 0.25),
                     DType::f32);
  const auto without = without_dropout(with);
  REQUIRE(without);
  CHECK(signature(*without) == signature(plain));
  CHECK_FALSE(one_kernel_per_op(with, DType::f32));  // a reduction has no [M,N] kernel of its own
}

TEST_CASE("epilogue_after_gemm: the accumulator read as an [M,N] input gives the fused chain's values") {
  // f32 operands: the GEMM's output is the fp32 accumulator itself, so the
  // two-step result equals the fused one bit for bit, dropout masks included.
  const KernelSpec gemm = gemm_bias_act(DType::f32, OpKind::gelu_tanh, true);
  const EpilogueAfterGemm ep = epilogue_after_gemm(gemm, DType::f32);
  CHECK(ep.gemm_output == "gemm_out");
  CHECK(ep.spec.mainloop.kind == MainloopKind::elementwise);
  CHECK_NOTHROW(verify(ep.spec));
  const Value in = ep.spec.graph.find("gemm_out");
  REQUIRE(in.valid());
  CHECK(ep.spec.graph.node(in).dtype == DType::f32);
  CHECK(ep.spec.graph.node(in).broadcast == Broadcast::full);
  CHECK(ep.spec.graph.dropout_count() == 1);

  const Shape shape{6, 20, 9};
  const LaunchArgs args{1234, 8};
  const TensorMap in_gemm = make_inputs(gemm, shape, 5);
  const HostTensor fused = evaluate(gemm, shape, in_gemm, args).at("y");
  TensorMap product = evaluate(plain_gemm(DType::f32, DType::f32), shape,
                               {{"a", in_gemm.at("a")}, {"b", in_gemm.at("b")}}, {});
  TensorMap in_epi = {{"gemm_out", product.at("y")}, {"bias", in_gemm.at("bias")}};
  check_same_values(evaluate(ep.spec, {shape.m, shape.n, 0}, in_epi, args).at("y"), fused);
  CHECK_NOTHROW(emit_kernel(ep.spec, {4096, 4096, 0}));

  // f16: the accumulator is stored as f16 first, as a separate GEMM does.
  const EpilogueAfterGemm half = epilogue_after_gemm(gemm_bias_act(DType::f16, OpKind::relu, true), DType::f16);
  CHECK(half.spec.graph.node(half.spec.graph.find(half.gemm_output)).dtype == DType::f16);

  // The name is free in the chain.
  KernelSpec taken = gemm_bias_act(DType::f16, OpKind::relu, false);
  Value r = taken.graph.input("gemm_out", DType::f16);
  taken.graph.output("z", taken.graph.add(taken.graph.accumulator(), r), DType::f16);
  const EpilogueAfterGemm renamed = epilogue_after_gemm(taken, DType::f16);
  CHECK(renamed.gemm_output == "gemm_out_");
  CHECK_NOTHROW(verify(renamed.spec));
}

TEST_CASE("epilogue_after_gemm: a dual GEMM's two accumulators become gemm_out0 and gemm_out1") {
  // f32 operands: D0 and D1 are the accumulators themselves, so the two-step
  // result equals the fused one bit for bit.
  KernelSpec dual;
  dual.mainloop = {MainloopKind::dual_gemm, DType::f32, DType::f32, Layout::row, Layout::col};
  Graph& g = dual.graph;
  const Value gate = g.sigmoid(g.add(g.accumulator(0), g.input("bias", DType::f32, Broadcast::row)));
  g.output("y", g.dropout(g.mul(gate, g.accumulator(1)), 0.25), DType::f32);
  const EpilogueAfterGemm ep = epilogue_after_gemm(dual, DType::f32);
  CHECK(ep.gemm_outputs == std::vector<std::string>{"gemm_out0", "gemm_out1"});
  CHECK_NOTHROW(verify(ep.spec));
  const Shape shape{5, 12, 7};
  const LaunchArgs args{99, 3};
  const TensorMap in_dual = make_inputs(dual, shape, 6);
  const TensorMap fused = evaluate(dual, shape, in_dual, args);
  // D0 = A B0 and D1 = A B1, from the reference's own GEMM (a chain that outputs acc0 / acc1).
  TensorMap in_ep{{"bias", in_dual.at("bias")}};
  for (int i = 0; i < 2; ++i) {
    KernelSpec acc;
    acc.mainloop = dual.mainloop;
    acc.graph.output("d", acc.graph.accumulator(i), DType::f32);
    acc.graph.output("other", acc.graph.accumulator(1 - i), DType::f32);
    const TensorMap operands{{"a", in_dual.at("a")}, {"b0", in_dual.at("b0")}, {"b1", in_dual.at("b1")}};
    in_ep.emplace(ep.gemm_outputs[static_cast<std::size_t>(i)], evaluate(acc, shape, operands, {}).at("d"));
  }
  const TensorMap two_step = evaluate(ep.spec, {shape.m, shape.n, 0}, in_ep, args);
  CHECK(two_step.at("y").bytes == fused.at("y").bytes);
}

TEST_CASE("chain_is_plain_gemm: only the accumulator, stored in the GEMM's dtype") {
  CHECK(chain_is_plain_gemm(plain_gemm(DType::f16, DType::f16), DType::f16));
  CHECK_FALSE(chain_is_plain_gemm(plain_gemm(DType::f16, DType::f32), DType::f16));
  CHECK_FALSE(chain_is_plain_gemm(gemm_bias_act(DType::f16, OpKind::relu, false), DType::f16));
}

TEST_CASE("one_kernel_per_op on a gemm chain reads the accumulator as the GEMM's output") {
  const auto specs = one_kernel_per_op(gemm_bias_act(DType::bf16, OpKind::relu, true), DType::bf16);
  REQUIRE(specs);
  REQUIRE(specs->size() == 3);  // add, relu, dropout
  const Graph& add = specs->front().graph;
  CHECK(add.node(add.find("a0")).dtype == DType::bf16);
  CHECK(add.node(add.find("a1")).broadcast == Broadcast::row);
  for (const KernelSpec& s : *specs) CHECK_NOTHROW(verify(s));
  CHECK(one_kernel_per_op(plain_gemm(DType::f16, DType::f16), DType::f16)->empty());
}

TEST_CASE("match_lt_epilogue: bias + relu or gelu_tanh at the start of the chain") {
  auto m = match_lt_epilogue(gemm_bias_act(DType::f16, OpKind::relu, true));
  REQUIRE(m);
  CHECK(m->kind == LtEpilogueKind::relu_bias);
  CHECK(m->bias == "bias");
  CHECK(m->bias_dtype == DType::f16);
  CHECK(m->not_covered == std::vector<std::string>{"dropout"});
  CHECK(m->output_is_activation);

  m = match_lt_epilogue(gemm_bias_act(DType::bf16, OpKind::gelu_tanh, false, true));  // add(bias, acc)
  REQUIRE(m);
  CHECK(m->kind == LtEpilogueKind::gelu_bias);
  CHECK(m->not_covered.empty());
  CHECK(m->output_is_activation);

  // cuBLASLt's GELU is the tanh form; other activations have no epilogue.
  CHECK_FALSE(match_lt_epilogue(gemm_bias_act(DType::f16, OpKind::gelu_erf, true)));
  CHECK_FALSE(match_lt_epilogue(gemm_bias_act(DType::f16, OpKind::silu, false)));
  CHECK_FALSE(match_lt_epilogue(plain_gemm(DType::f16, DType::f16)));

  // The bias must be one value per column of C.
  for (Broadcast b : {Broadcast::col, Broadcast::full, Broadcast::scalar}) {
    KernelSpec s;
    s.mainloop = {MainloopKind::gemm, DType::f16, DType::f16, Layout::row, Layout::row};
    Value v = s.graph.input("v", DType::f16, b);
    s.graph.output("y", s.graph.relu(s.graph.add(s.graph.accumulator(), v)), DType::f16);
    CHECK_FALSE(match_lt_epilogue(s));
  }

  // The accumulator also stored: the chain does not start with the epilogue alone.
  KernelSpec both = gemm_bias_act(DType::f16, OpKind::relu, false);
  both.graph.output("acc_out", both.graph.accumulator(), DType::f16);
  CHECK_FALSE(match_lt_epilogue(both));

  // More after the activation: matched, with what it leaves out.
  KernelSpec more;
  more.mainloop = {MainloopKind::gemm, DType::f16, DType::f16, Layout::col, Layout::row};
  Graph& g = more.graph;
  Value bias = g.input("b1", DType::f32, Broadcast::row);
  Value res = g.input("residual", DType::f16);
  g.output("y", g.add(g.dropout(g.relu(g.add(g.accumulator(), bias)), 0.1), res), DType::f16);
  m = match_lt_epilogue(more);
  REQUIRE(m);
  CHECK(m->bias_dtype == DType::f32);
  CHECK(m->not_covered == std::vector<std::string>{"dropout", "add"});
  CHECK_FALSE(m->output_is_activation);

  KernelSpec elementwise;
  Value x = elementwise.graph.input("x", DType::f16);
  Value b2 = elementwise.graph.input("bias", DType::f16, Broadcast::row);
  elementwise.graph.output("y", elementwise.graph.relu(elementwise.graph.add(x, b2)), DType::f16);
  CHECK_FALSE(match_lt_epilogue(elementwise));
}

TEST_CASE("match_lt_dgrad: acc * gelu_tanh_deriv(saved) and its col_sum, as cuBLASLt's DGELU_BGRAD") {
  const KernelSpec dgrad = load_spec(std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples" / "backward" /
                                     "gemm_bias_gelu_dgrad.json");
  const std::optional<LtDgradMatch> m = match_lt_dgrad(dgrad);
  REQUIRE(m);
  CHECK(m->kind == LtEpilogueKind::dgelu_bgrad);
  CHECK(m->saved == "saved_z");
  CHECK(m->dz == "dacc");
  CHECK(m->db == "dbias");
  // The ReLU chain's dgrad (grad --as-gemm-epilogue): acc * relu_deriv(y), y the
  // forward's output read back, and its col_sum: DRELU_BGRAD.
  const KernelSpec relu = as_gemm_epilogue(
      grad(load_spec(std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples" / "chains" / "gemm_bias_relu.json"))
          .backward,
      "dy", Mainloop{MainloopKind::gemm, DType::f16, DType::f16, Layout::row, Layout::row});
  const std::optional<LtDgradMatch> mr = match_lt_dgrad(relu);
  REQUIRE(mr);
  CHECK(mr->kind == LtEpilogueKind::drelu_bgrad);
  CHECK(mr->saved == "y");
  CHECK(lt_epilogue_name(mr->kind) == "CUBLASLT_EPILOGUE_DRELU_BGRAD");
  // Not that form: no col_sum output, another derivative, a dropout, a row input as the saved one.
  auto build = [](bool sum, OpKind deriv, bool dropout, Broadcast saved) {
    KernelSpec s;
    s.mainloop = {MainloopKind::gemm, DType::bf16, DType::bf16, Layout::row, Layout::row};
    Graph& g = s.graph;
    Value acc = g.accumulator(0);
    if (dropout) acc = g.dropout(acc, 0.1);
    const Value dz = g.mul(g.unary(deriv, g.input("saved", DType::bf16, saved)), acc);
    g.output("dz", dz, DType::bf16);
    if (sum) g.output("db", g.unary(OpKind::col_sum, dz), DType::f32);
    return s;
  };
  CHECK(match_lt_dgrad(build(true, OpKind::gelu_tanh_deriv, false, Broadcast::full)));  // mul(deriv, acc)
  CHECK(match_lt_dgrad(build(true, OpKind::relu_deriv, false, Broadcast::full))->kind == LtEpilogueKind::drelu_bgrad);
  CHECK_FALSE(match_lt_dgrad(build(true, OpKind::relu_deriv, true, Broadcast::full)));
  CHECK_FALSE(match_lt_dgrad(build(true, OpKind::relu_deriv, false, Broadcast::row)));
  CHECK_FALSE(match_lt_dgrad(build(false, OpKind::gelu_tanh_deriv, false, Broadcast::full)));
  CHECK_FALSE(match_lt_dgrad(build(true, OpKind::gelu_erf_deriv, false, Broadcast::full)));
  CHECK_FALSE(match_lt_dgrad(build(true, OpKind::gelu_tanh_deriv, true, Broadcast::full)));
  CHECK_FALSE(match_lt_dgrad(build(true, OpKind::gelu_tanh_deriv, false, Broadcast::row)));
  // A forward chain is the forward matcher's, not this one's.
  CHECK_FALSE(match_lt_dgrad(gemm_bias_act(DType::f16, OpKind::gelu_tanh, true)));
}

// cuBLAS semantics on the CPU: D (column-major m x n, ld) = op(A) op(B), each
// stored matrix column-major `rows x cols` with its ld, op() transposing when
// asked. Run on the device buffers' bytes (to_device_layout), it must give the
// row-major product of the logical operands.
TEST_CASE("column_major_problem: cuBLAS's column-major matmul on the spec's buffers is row-major C = A B") {
  using baseline::LtOperand;
  const Shape shape{5, 7, 3};
  for (Layout la : {Layout::row, Layout::col})
    for (Layout lb : {Layout::row, Layout::col}) {
      CAPTURE(to_string(la));
      CAPTURE(to_string(lb));
      const KernelSpec spec = plain_gemm(DType::f32, DType::f32, la, lb);
      const baseline::LtProblem p = baseline::column_major_problem(spec.mainloop, shape);
      CHECK(p.m == 7);
      CHECK(p.n == 5);
      CHECK(p.k == 3);
      CHECK(p.d == LtOperand{false, 7, 5, 7});
      const TensorMap in = make_inputs(spec, shape, 11);
      const HostTensor a = to_device_layout(spec, "a", in.at("a")), b = to_device_layout(spec, "b", in.at("b"));
      // cuBLAS's A is our B, its B our A.
      auto op_element = [](const HostTensor& t, const LtOperand& o, std::uint64_t r, std::uint64_t c) {
        if (o.transpose) std::swap(r, c);
        REQUIRE(r < o.rows);
        REQUIRE(c < o.cols);
        return static_cast<double>(t.get(static_cast<std::int64_t>(r + c * static_cast<std::uint64_t>(o.ld))));
      };
      HostTensor d = HostTensor::zeros(DType::f32, {shape.m, shape.n});
      for (std::uint64_t i = 0; i < p.m; ++i)
        for (std::uint64_t j = 0; j < p.n; ++j) {
          double sum = 0;
          for (std::uint64_t l = 0; l < p.k; ++l) sum += op_element(b, p.a, i, l) * op_element(a, p.b, l, j);
          d.set(static_cast<std::int64_t>(i + j * static_cast<std::uint64_t>(p.d.ld)), static_cast<float>(sum));
        }
      check_same_values(d, evaluate(spec, shape, in, {}).at("y"));
    }
}

TEST_CASE("cuBLASLt loads through dlopen where it is installed, and says what it tried where not") {
  if (baseline::CublasLt* lt = baseline::cublaslt_or_null()) {
    MESSAGE(lt->version_string() << " at " << lt->library_path());
    CHECK(lt->version_string().starts_with("cuBLASLt 1"));
    // Every attribute value and size we declare is one this library accepts
    // (cublasLtMatmulDescSetAttribute refuses a size that is not the attribute's).
    for (DType dt : {DType::f16, DType::bf16, DType::f32})
      for (Layout la : {Layout::row, Layout::col})
        for (Layout lb : {Layout::row, Layout::col}) {
          baseline::LtMatmulConfig c{{MainloopKind::gemm, dt, dt, la, lb}, {256, 128, 64}, dt};
          CHECK_NOTHROW(baseline::check_descriptors(*lt, c));
          for (LtEpilogueKind k : {LtEpilogueKind::relu_bias, LtEpilogueKind::gelu_bias}) {
            c.epilogue = k;
            c.bias = 0x10000;
            c.bias_dtype = dt;
            CHECK_NOTHROW(baseline::check_descriptors(*lt, c));
            c.bias_dtype = DType::f32;  // another type than D's: BIAS_DATA_TYPE is set
            CHECK_NOTHROW(baseline::check_descriptors(*lt, c));
          }
          // The backward's DGELU_BGRAD: the bias gradient's and the saved input's pointers, and its ld.
          c.epilogue = LtEpilogueKind::dgelu_bgrad;
          c.bias = 0x10000;
          c.aux = 0x20000;
          c.aux_ld = 128;
          CHECK_NOTHROW(baseline::check_descriptors(*lt, c));
          // DRELU_BGRAD reads the bit mask RELU_AUX writes (their ld in bits).
          c.epilogue = LtEpilogueKind::drelu_bgrad;
          CHECK_NOTHROW(baseline::check_descriptors(*lt, c));
          c.epilogue = LtEpilogueKind::relu_aux;
          c.bias = 0;
          CHECK_NOTHROW(baseline::check_descriptors(*lt, c));
        }
  } else {
    MESSAGE(baseline::cublaslt_unavailable_reason());
    CHECK(baseline::cublaslt_unavailable_reason().starts_with(
        "cuBLASLt not found (tried libcublasLt.so.13, libcublasLt.so.12, libcublasLt.so"));
  }
}
