// Generated source pinned as golden text (compile tier): a change to
// codegen or a template that alters what a representative chain compiles to
// fails here and shows up as a diff of tests/golden/*.cu in review.
// Regenerate after an intended change with
//   EPIFUSE_UPDATE_GOLDEN=1 build/epifuse_tests -tc='*golden*'
// and read the diff before committing it.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <doctest/doctest.h>

#include "epifuse/autodiff.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/json.hpp"
#include "test_specs.hpp"

using namespace epifuse;

namespace {

const std::filesystem::path kGoldenDir = std::filesystem::path(EPIFUSE_SOURCE_DIR) / "tests/golden";
const std::filesystem::path kExamples = std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples/chains";

struct GoldenCase {
  std::string file;  // tests/golden/<file>
  KernelSpec spec;
  Shape shape;
  std::optional<TileConfig> tile;
  KernelPath path = KernelPath::fastest;
  std::string target;  // empty: no architecture-specific tile
};

std::vector<GoldenCase> golden_cases() {
  std::vector<GoldenCase> c;
  // The acceptance chain in f32 (accurate GELU, one Philox call per vector),
  // vector path only.
  c.push_back({"bias_gelu_dropout_add_f32.cu", load_spec(kExamples / "bias_gelu_dropout_add.json"),
               {16384, 4096, 0}, std::nullopt});
  // The same chain in bf16 with 16 elements per thread: tanh.approx GELU,
  // four Philox calls per vector, packed bf16 stores.
  c.push_back({"bias_gelu_dropout_add_bf16_v16.cu", test_specs::bias_gelu_dropout_add(DType::bf16),
               {16384, 4096, 0}, ElementwiseTile{128, 16, 0}});
  // Its bf16 backward: the column-sum kernel, dbias summed down the rows, dy
  // and x staged through shared memory on sm_80+ by a tile of three stages
  // (Note [Staged column loads]).
  c.push_back({"bias_gelu_dropout_add_backward_bf16_col_sum.cu",
               grad(test_specs::bias_gelu_dropout_add(DType::bf16)).backward, {16384, 8192, 0},
               ElementwiseTile{256, 8, 0, 3}});
  // add_mul on a ragged shape: the general kernel, scalar tail included.
  c.push_back({"add_mul_f32_ragged.cu", load_spec(kExamples / "add_mul.json"), {3, 1001, 0}, std::nullopt});
  // The compatibility RNG (one Philox call per element), the general path
  // forced as a misaligned launch gets it, rows that wrap inside a vector.
  c.push_back({"bias_gelu_dropout_add_f16_triton_general.cu",
               test_specs::bias_gelu_dropout_add(DType::f16, 0.25, RngMode::triton), {4, 66, 0}, ElementwiseTile{256, 8, 4},
               KernelPath::general});
  // One per mainloop and dialect beside the elementwise ones.
  const KernelSpec dropout_gemm = load_spec(kExamples / "gemm_bias_relu_dropout.json");
  c.push_back({"row_scaled_masked_softmax_dropout_sm90a.cu", load_spec(kExamples / "scaled_masked_softmax_dropout.json"),
               {64, 4096, 0}, RowTile{256, 8, 2, 1}, KernelPath::fastest, "sm_90a"});
  c.push_back({"gemm_simt_f32_exact.cu", load_spec(std::filesystem::path(EPIFUSE_SOURCE_DIR) /
                                                   "tests/fuzz/seeds/gemm_f32_exact_outputs.json"),
               {128, 128, 64}, std::nullopt, KernelPath::fastest, "sm_80"});
  c.push_back({"gemm_mma_bias_relu_dropout_sm80.cu", dropout_gemm, {256, 256, 256}, std::nullopt,
               KernelPath::fastest, "sm_80"});
  // Strided A and B (Note [Strided operands]): the lda and ldb fields the loaders read.
  c.push_back({"gemm_mma_strided_operands_sm80.cu", dropout_gemm, {256, 256, 256, 264, 320}, std::nullopt,
               KernelPath::fastest, "sm_80"});
  // Batched (Note [Batched GEMM]): blockIdx.z's batch on mma.sync, the walk over
  // batch x units and the 3-D tensor maps' copies on wgmma.
  c.push_back({"gemm_mma_batched_sm80.cu", dropout_gemm, {256, 256, 256, 0, 0, 0, 3}, std::nullopt,
               KernelPath::fastest, "sm_80"});
  c.push_back({"gemm_wgmma_batched_sm90a.cu", dropout_gemm, {1024, 1024, 1024, 0, 0, 0, 8},
               WgmmaTile{128, 256, 64, 4, 8}, KernelPath::fastest, "sm_90a"});
  c.push_back({"gemm_wgmma_bias_relu_dropout_sm90a.cu", dropout_gemm, {4096, 4096, 4096},
               WgmmaTile{128, 256, 64, 4, 8}, KernelPath::fastest, "sm_90a"});
  c.push_back({"dual_wgmma_gating_sm90a.cu", load_spec(kExamples / "gating.json"), {4096, 4096, 4096}, std::nullopt,
               KernelPath::fastest, "sm_90a"});
  // A dgrad epilogue with its bias gradient (Note [GEMM column sums]): the
  // mma.sync fragment epilogue on sm_80 and its staged one on sm_90a (a
  // requested tile), and the wgmma kernel a col_sum chain takes by default on
  // sm_90a (the fragment epilogue: bf16 dacc beside the f32 db).
  const KernelSpec dgrad = spec_from_json_text(R"({"epifuse":1,"name":"dgrad_gelu_bias",
    "mainloop":{"kind":"gemm","a":"bf16","b":"bf16","b_layout":"col"},"inputs":{"saved":{"dtype":"bf16"}},
    "ops":[{"name":"d","op":"gelu_tanh_deriv","args":["saved"]},{"name":"dacc","op":"mul","args":["acc","d"]},
           {"name":"db","op":"col_sum","args":["dacc"]}],
    "outputs":{"dacc":{"dtype":"bf16","value":"dacc"},"db":{"dtype":"f32"}}})");
  c.push_back({"gemm_mma_dgrad_col_sum_sm80.cu", dgrad, {1000, 520, 64}, GemmTile{64, 64, 32, 2, 2, 4, 8},
               KernelPath::fastest, "sm_80"});
  c.push_back({"gemm_mma_dgrad_col_sum_sm90a.cu", dgrad, {4096, 4096, 256}, GemmTile{128, 256, 32, 2, 4, 4, 8},
               KernelPath::fastest, "sm_90a"});
  c.push_back({"gemm_wgmma_dgrad_col_sum_sm90a.cu", dgrad, {4096, 4096, 256}, std::nullopt, KernelPath::fastest,
               "sm_90a"});
  // Its saved input and dacc output strided (Note [Strided epilogue tensors]):
  // the ld fields, the prefetched rows and the fragment stores at their lds.
  Shape strided_dgrad{4096, 4096, 256};
  strided_dgrad.ld_inputs = {4160};
  strided_dgrad.ld_outputs = {4104};
  c.push_back({"gemm_wgmma_strided_epilogue_sm90a.cu", dgrad, strided_dgrad, std::nullopt, KernelPath::fastest,
               "sm_90a"});
  // A training forward without dropout: y and the saved pre-activation, two 16-bit
  // outputs of the fragment epilogue (Note [Fragment epilogue]).
  const KernelSpec saved = spec_from_json_text(R"({"epifuse":1,"name":"bias_gelu_saved",
    "mainloop":{"kind":"gemm","a":"bf16","b":"bf16","b_layout":"col"},"inputs":{"bias":{"dtype":"bf16","broadcast":"row"}},
    "ops":[{"name":"z","op":"add","args":["acc","bias"]},{"name":"y","op":"gelu_tanh","args":["z"]}],
    "outputs":{"y":{"dtype":"bf16"},"saved_z":{"dtype":"bf16","value":"z"}}})");
  c.push_back({"gemm_wgmma_saved_two_outputs_sm90a.cu", saved, {4096, 4096, 4096}, std::nullopt, KernelPath::fastest,
               "sm_90a"});
  c.push_back({"gemm_mfma_bias_relu_gfx90a.hip", load_spec(kExamples / "gemm_bias_relu.json"), {256, 256, 256},
               std::nullopt, KernelPath::fastest, "gfx90a"});
  c.push_back({"gemm_wmma_bias_relu_gfx1100.hip", load_spec(kExamples / "gemm_bias_relu.json"), {256, 256, 256},
               std::nullopt, KernelPath::fastest, "gfx1100"});
  return c;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("generated source of representative chains equals the golden text in tests/golden") {
  const bool update = std::getenv("EPIFUSE_UPDATE_GOLDEN") != nullptr;
  for (const GoldenCase& g : golden_cases()) {
    const std::string text = emit_kernel(g.spec, g.shape, g.tile, g.path, g.target).text;
    const auto path = kGoldenDir / g.file;
    if (update) {
      std::ofstream(path, std::ios::binary) << text;
      MESSAGE("wrote " << path.string());
      continue;
    }
    INFO("golden file " << path.string() << " (EPIFUSE_UPDATE_GOLDEN=1 regenerates it)");
    REQUIRE(std::filesystem::exists(path));
    const std::string want = read_file(path);
    if (text != want) {
      // Point at the first line that differs instead of printing two kernels.
      std::istringstream a(text), b(want);
      std::string la, lb;
      int line = 1;
      while (std::getline(a, la) && std::getline(b, lb) && la == lb) ++line;
      FAIL_CHECK("line " << line << " differs:\n  generated: " << la << "\n  golden:    " << lb);
    }
  }
}
