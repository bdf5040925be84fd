#pragma once
// cuBLASLt for `epifuse bench`'s baselines, and nothing else (docs/bench.md):
// loaded with dlopen like every GPU library (Note [Backends are dlopened]),
// its few types and entry points declared in cublaslt_baseline.cpp, never
// cublasLt.h. Only the bench includes this header; the JIT path never does.
//
//   CublasLt* lt = cublaslt_or_null();   // nullptr: cublaslt_unavailable_reason() says why
//   LtMatmul gemm(*lt, {spec.mainloop, shape, DType::f16});
//   gemm.run(a, b, d);                   // asynchronous, on the legacy default stream
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda_driver.hpp"
#include "backend/dynlib.hpp"
#include "bench/bench_specs.hpp"
#include "epifuse/spec.hpp"

namespace epifuse::baseline {

/// Tried in this order on the loader path, then in the toolkit's library folders.
const std::vector<std::string>& cublaslt_sonames();

/// One matrix of a column-major cuBLASLt matmul as its layout descriptor has
/// it: the stored matrix (rows x cols, leading dimension ld) and whether the
/// matmul reads it transposed (CUBLAS_OP_T).
struct LtOperand {
  bool transpose = false;
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
  friend bool operator==(const LtOperand&, const LtOperand&) = default;
};

/// Row-major C[M,N] = A[M,K]·B[K,N] is column-major C^T[N,M] = B^T·A^T, so
/// cuBLAS's A is our B, its B our A, and its (m, n, k) is (N, M, K). A device
/// buffer holds an operand in the spec's layout: row-major A is column-major
/// K x M with ld K (A^T, no transpose), column-major A is M x K with ld M
/// (transposed); B alike with N. D (and C) is N x M, ld N.
struct LtProblem {
  std::uint64_t m = 0, n = 0, k = 0;
  LtOperand a;  ///< cuBLAS's A: our B
  LtOperand b;  ///< cuBLAS's B: our A
  LtOperand d;
};
LtProblem column_major_problem(const Mainloop& mainloop, const Shape& shape);

/// The dlopened library and its one handle.
class CublasLt {
 public:
  /// Opens libcublasLt and resolves its entry points; RuntimeError saying what
  /// was tried when it is absent. Needs no GPU (the handle is made on first use).
  static std::unique_ptr<CublasLt> load();
  ~CublasLt();

  /// "cuBLASLt 13.0.2" (cublasLtGetVersion).
  std::string version_string() const;
  const std::string& library_path() const { return lib_.path(); }

  struct Api;
  const Api& api() const { return *api_; }
  /// The cublasLtHandle_t, created on first call on the current context
  /// (RuntimeError when cublasLtCreate fails).
  void* handle();

 private:
  explicit CublasLt(backend::DynLib lib);
  backend::DynLib lib_;
  std::unique_ptr<Api> api_;
  std::size_t version_ = 0;
  std::once_flag handle_once_;
  void* handle_ = nullptr;
};

/// The process's cuBLASLt, loaded on first use; nullptr when it cannot be.
CublasLt* cublaslt_or_null();
/// Why cublaslt_or_null() is null ("cuBLASLt not found (tried ...)"); empty when it loaded.
const std::string& cublaslt_unavailable_reason();

/// What one cuBLASLt matmul computes. Operands and C/D share the mainloop's
/// dtype family: f16 and bf16 accumulate in fp32 (CUBLAS_COMPUTE_32F, fp32
/// alpha/beta); f32 is exact fp32 (CUBLAS_COMPUTE_32F, never tf32).
struct LtMatmulConfig {
  Mainloop mainloop;                       ///< operand dtype and layouts
  Shape shape;
  DType d = DType::f16;                    ///< C and D
  std::optional<LtEpilogueKind> epilogue;  ///< nullopt: CUBLASLT_EPILOGUE_DEFAULT
  /// The epilogue's [N] vector (dgelu_bgrad, drelu_bgrad: the bias gradient, written in D's dtype).
  backend::CUdeviceptr bias = 0;
  DType bias_dtype = DType::f16;
  /// dgelu_bgrad: the GELU's saved input, [M,N] in D's dtype; drelu_bgrad: the
  /// bit mask relu_aux wrote (one bit an element); relu_aux: where it writes it.
  backend::CUdeviceptr aux = 0;
  /// aux's leading dimension in cuBLASLt's column-major view: N elements, or
  /// for a bit mask a multiple of 128 bits.
  std::int64_t aux_ld = 0;
};

/// Makes and destroys every descriptor LtMatmul would (operation, attributes,
/// layouts, heuristic preference) without a handle or a GPU: RuntimeError
/// naming the attribute this cuBLASLt refuses (a wrong value or size).
void check_descriptors(CublasLt& lt, const LtMatmulConfig& config);

/// One planned matmul: descriptors made, the algorithm chosen by
/// cublasLtMatmulAlgoGetHeuristic with a 32 MiB workspace, which it owns.
class LtMatmul {
 public:
  /// RuntimeError naming the call that failed, or saying that the heuristic
  /// found no algorithm for this configuration.
  LtMatmul(CublasLt& lt, const LtMatmulConfig& config);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  /// D = A·B (then the epilogue), asynchronous on `stream`.
  void run(backend::CUdeviceptr a, backend::CUdeviceptr b, backend::CUdeviceptr d,
           backend::CUstream stream = nullptr) const;
  /// The workspace the chosen algorithm asked for.
  std::size_t workspace_used() const { return workspace_used_; }

  static constexpr std::size_t k_workspace_bytes = 32u << 20;

  struct Descriptors;

 private:
  CublasLt& lt_;
  std::unique_ptr<Descriptors> desc_;
  backend::DeviceBuffer workspace_;
  std::size_t workspace_used_ = 0;
};

}  // namespace epifuse::baseline
