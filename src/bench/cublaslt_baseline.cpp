// cuBLASLt through dlopen, for the bench's baselines (cublaslt_baseline.hpp).
#include "bench/cublaslt_baseline.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include "epifuse/errors.hpp"

namespace epifuse::baseline {

namespace {

// The cuBLASLt ABI we use, declared here so that no cuBLAS header is needed to
// build. Values from the CUDA 13.0 toolkit's cublasLt.h, cublas_api.h and
// library_types.h; all of them unchanged since CUDA 11.
using Status = int;  // cublasStatus_t
constexpr Status CUBLAS_STATUS_SUCCESS = 0;
constexpr int CUBLAS_COMPUTE_32F = 68;  // cublasComputeType_t: fp32 accumulate, no tf32
constexpr int CUBLAS_COMPUTE_32F_FAST_TF32 = 77;  // f32 operands through tf32 (cublas_api.h)
constexpr int CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14;  // cudaDataType
constexpr std::int32_t CUBLAS_OP_N = 0, CUBLAS_OP_T = 1;
// cublasLtMatmulDescAttributes_t
constexpr int CUBLASLT_MATMUL_DESC_TRANSA = 3;          // int32_t
constexpr int CUBLASLT_MATMUL_DESC_TRANSB = 4;          // int32_t
constexpr int CUBLASLT_MATMUL_DESC_EPILOGUE = 7;        // uint32_t
constexpr int CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8;    // const void*
constexpr int CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11;  // const void* (the backward's input)
constexpr int CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12;       // int64_t, elements
constexpr int CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26; // int32_t (cudaDataType)
// cublasLtEpilogue_t
constexpr std::uint32_t CUBLASLT_EPILOGUE_DEFAULT = 1;
constexpr std::uint32_t CUBLASLT_EPILOGUE_RELU_BIAS = 2 | 4;   // RELU | BIAS
constexpr std::uint32_t CUBLASLT_EPILOGUE_GELU_BIAS = 32 | 4;  // GELU | BIAS
constexpr std::uint32_t CUBLASLT_EPILOGUE_DGELU_BGRAD = 64 | 128 | 16;  // DGELU (64 | 128) | BGRAD
constexpr std::uint32_t CUBLASLT_EPILOGUE_DRELU_BGRAD = 8 | 128 | 16;   // DRELU (8 | 128) | BGRAD
constexpr std::uint32_t CUBLASLT_EPILOGUE_RELU_AUX = 2 | 128;           // RELU | the aux output
// cublasLtMatrixLayoutAttribute_t
constexpr int CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5;           // int32_t
constexpr int CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6;  // int64_t, elements
// cublasLtMatmulPreferenceAttributes_t
constexpr int CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1;  // uint64_t

struct LtMatmulDescOpaque;
struct LtLayoutOpaque;
struct LtPreferenceOpaque;
using LtMatmulDesc = LtMatmulDescOpaque*;
using LtLayout = LtLayoutOpaque*;
using LtPreference = LtPreferenceOpaque*;
using LtHandle = void*;  // cublasLtHandle_t

struct LtAlgo {  // cublasLtMatmulAlgo_t
  std::uint64_t data[8];
};
struct LtHeuristicResult {  // cublasLtMatmulHeuristicResult_t
  LtAlgo algo;
  std::size_t workspace_size;
  Status state;
  float waves_count;
  int reserved[4];
};
static_assert(sizeof(LtHeuristicResult) == 96, "cublasLtMatmulHeuristicResult_t is 96 bytes");

int cuda_data_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

}  // namespace

const std::vector<std::string>& cublaslt_sonames() {
  static const std::vector<std::string> names = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"};
  return names;
}

LtProblem column_major_problem(const Mainloop& ml, const Shape& s) {
  const auto m = static_cast<std::uint64_t>(s.m), n = static_cast<std::uint64_t>(s.n),
             k = static_cast<std::uint64_t>(s.k);
  LtProblem p;
  p.m = n;
  p.n = m;
  p.k = k;
  // cuBLAS's A = our B; op(A) is N x K.
  p.a = ml.b_layout == Layout::row ? LtOperand{false, n, k, s.n}   // B^T: column-major N x K
                                   : LtOperand{true, k, n, s.k};   // B: column-major K x N
  // cuBLAS's B = our A; op(B) is K x M.
  p.b = ml.a_layout == Layout::row ? LtOperand{false, k, m, s.k}   // A^T: column-major K x M
                                   : LtOperand{true, m, k, s.m};   // A: column-major M x K
  p.d = LtOperand{false, n, m, s.n};
  return p;
}

struct CublasLt::Api {
  Status (*Create)(LtHandle*);
  const char* (*GetStatusName)(Status);
  std::size_t (*GetVersion)();
  Status (*MatmulDescCreate)(LtMatmulDesc*, int, int);
  Status (*MatmulDescDestroy)(LtMatmulDesc);
  Status (*MatmulDescSetAttribute)(LtMatmulDesc, int, const void*, std::size_t);
  Status (*MatrixLayoutCreate)(LtLayout*, int, std::uint64_t, std::uint64_t, std::int64_t);
  Status (*MatrixLayoutDestroy)(LtLayout);
  Status (*MatrixLayoutSetAttribute)(LtLayout, int, const void*, std::size_t);
  Status (*MatmulPreferenceCreate)(LtPreference*);
  Status (*MatmulPreferenceDestroy)(LtPreference);
  Status (*MatmulPreferenceSetAttribute)(LtPreference, int, const void*, std::size_t);
  Status (*MatmulAlgoGetHeuristic)(LtHandle, LtMatmulDesc, LtLayout, LtLayout, LtLayout, LtLayout, LtPreference, int,
                                   LtHeuristicResult*, int*);
  Status (*Matmul)(LtHandle, LtMatmulDesc, const void*, const void*, LtLayout, const void*, LtLayout, const void*,
                   const void*, LtLayout, void*, LtLayout, const LtAlgo*, void*, std::size_t, backend::CUstream);

  explicit Api(const backend::DynLib& l) {
#define EPIFUSE_LT_SYM(field, name) field = l.get<decltype(field)>(name)
    EPIFUSE_LT_SYM(Create, "cublasLtCreate");
    EPIFUSE_LT_SYM(GetStatusName, "cublasLtGetStatusName");
    EPIFUSE_LT_SYM(GetVersion, "cublasLtGetVersion");
    EPIFUSE_LT_SYM(MatmulDescCreate, "cublasLtMatmulDescCreate");
    EPIFUSE_LT_SYM(MatmulDescDestroy, "cublasLtMatmulDescDestroy");
    EPIFUSE_LT_SYM(MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
    EPIFUSE_LT_SYM(MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
    EPIFUSE_LT_SYM(MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
    EPIFUSE_LT_SYM(MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
    EPIFUSE_LT_SYM(MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
    EPIFUSE_LT_SYM(MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
    EPIFUSE_LT_SYM(MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
    EPIFUSE_LT_SYM(MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
    EPIFUSE_LT_SYM(Matmul, "cublasLtMatmul");
#undef EPIFUSE_LT_SYM
  }

  // Throws RuntimeError("cublasLtX failed: CUBLAS_STATUS_Y (n)") for a failing call.
  void check(Status s, const char* call) const {
    if (s != CUBLAS_STATUS_SUCCESS) {
      const char* name = GetStatusName(s);
      throw RuntimeError(fmt::format("{} failed: {} ({})", call, name ? name : "unknown status", s));
    }
  }
};

CublasLt::CublasLt(backend::DynLib lib) : lib_(std::move(lib)), api_(std::make_unique<Api>(lib_)) {
  version_ = api_->GetVersion();
}

CublasLt::~CublasLt() = default;

std::unique_ptr<CublasLt> CublasLt::load() {
  std::vector<std::string> candidates = cublaslt_sonames();
  for (const auto& d : backend::cuda_toolkit_lib_dirs())
    for (const auto& n : cublaslt_sonames()) candidates.push_back(d + "/" + n);
  std::optional<backend::DynLib> lib = backend::DynLib::open_first(candidates);
  if (!lib)
    throw RuntimeError(fmt::format("cuBLASLt not found (tried {} on the loader path and in {})",
                                   backend::join(cublaslt_sonames()), backend::join(backend::cuda_toolkit_lib_dirs())));
  return std::unique_ptr<CublasLt>(new CublasLt(std::move(*lib)));
}

std::string CublasLt::version_string() const {
  // cublasLtGetVersion: major * 10000 + minor * 100 + patch.
  return fmt::format("cuBLASLt {}.{}.{}", version_ / 10000, version_ / 100 % 100, version_ % 100);
}

void* CublasLt::handle() {
  std::call_once(handle_once_, [&] {
    backend::cuda().ensure_context();  // the primary context, which the CUDA runtime inside cuBLASLt adopts
    LtHandle h = nullptr;
    api_->check(api_->Create(&h), "cublasLtCreate");
    handle_ = h;
  });
  return handle_;
}

CublasLt* cublaslt_or_null() { return backend::load_once<CublasLt>().backend; }
const std::string& cublaslt_unavailable_reason() { return backend::load_once<CublasLt>().reason; }

// Every descriptor of one matmul, destroyed with it (also when the
// constructor throws half way).
struct LtMatmul::Descriptors {
  const CublasLt::Api& api;
  LtMatmulDesc op = nullptr;
  LtLayout a = nullptr, b = nullptr, d = nullptr;
  LtPreference preference = nullptr;
  LtAlgo algo{};

  // Every descriptor of the matmul `c`; needs no handle and no GPU.
  Descriptors(const CublasLt::Api& api, const LtMatmulConfig& c);
  ~Descriptors() { destroy(); }
  void destroy() noexcept {
    if (preference) api.MatmulPreferenceDestroy(preference);
    for (LtLayout l : {a, b, d})
      if (l) api.MatrixLayoutDestroy(l);
    if (op) api.MatmulDescDestroy(op);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

// A constructor that throws runs no destructor of its own: what was made
// before the failing call is destroyed here.
LtMatmul::Descriptors::Descriptors(const CublasLt::Api& api, const LtMatmulConfig& c) : api(api) {
  EPIFUSE_ASSERT(c.mainloop.kind == MainloopKind::gemm && c.mainloop.a == c.mainloop.b,
                 "cuBLASLt baseline of a {} mainloop with a={} b={}", to_string(c.mainloop.kind),
                 to_string(c.mainloop.a), to_string(c.mainloop.b));
  EPIFUSE_ASSERT(c.shape.k > 0, "cuBLASLt baseline with K = {}", c.shape.k);
  const LtProblem p = column_major_problem(c.mainloop, c.shape);
  try {
    const int compute = c.mainloop.math == GemmMath::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    api.check(api.MatmulDescCreate(&op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
    auto set = [&](int attribute, const auto& value, const char* what) {
      api.check(api.MatmulDescSetAttribute(op, attribute, &value, sizeof value), what);
    };
    const std::int32_t trans_a = p.a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
    const std::int32_t trans_b = p.b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
    set(CUBLASLT_MATMUL_DESC_TRANSA, trans_a, "cublasLtMatmulDescSetAttribute(TRANSA)");
    set(CUBLASLT_MATMUL_DESC_TRANSB, trans_b, "cublasLtMatmulDescSetAttribute(TRANSB)");
    std::uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    if (c.epilogue == LtEpilogueKind::relu_aux) {
      // D = relu(A·B) and the bit mask of A·B > 0 into aux (its ld in bits).
      epilogue = CUBLASLT_EPILOGUE_RELU_AUX;
      const void* aux = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(c.aux));
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux, "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)");
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, c.aux_ld, "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_LD)");
    } else if (c.epilogue == LtEpilogueKind::dgelu_bgrad || c.epilogue == LtEpilogueKind::drelu_bgrad) {
      // D = dGELU(A·B, aux) or dReLU(A·B, aux's bits); the bias gradient (a row
      // sum of D in cuBLASLt's view, our col_sum) into the bias pointer, in D's dtype.
      epilogue = c.epilogue == LtEpilogueKind::dgelu_bgrad ? CUBLASLT_EPILOGUE_DGELU_BGRAD
                                                           : CUBLASLT_EPILOGUE_DRELU_BGRAD;
      void* grad = reinterpret_cast<void*>(static_cast<std::uintptr_t>(c.bias));
      const void* aux = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(c.aux));
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, grad, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux, "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)");
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, c.aux_ld, "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_LD)");
    } else if (c.epilogue) {
      epilogue =
          *c.epilogue == LtEpilogueKind::relu_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
      const void* bias = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(c.bias));
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
      if (c.bias_dtype != c.d) {  // the default bias type is D's
        const std::int32_t bias_type = cuda_data_type(c.bias_dtype);
        set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type, "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
      }
    }
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "cublasLtMatmulDescSetAttribute(EPILOGUE)");

    const int operand = cuda_data_type(c.mainloop.a);
    api.check(api.MatrixLayoutCreate(&a, operand, p.a.rows, p.a.cols, p.a.ld), "cublasLtMatrixLayoutCreate(A)");
    api.check(api.MatrixLayoutCreate(&b, operand, p.b.rows, p.b.cols, p.b.ld), "cublasLtMatrixLayoutCreate(B)");
    api.check(api.MatrixLayoutCreate(&d, cuda_data_type(c.d), p.d.rows, p.d.cols, p.d.ld),
              "cublasLtMatrixLayoutCreate(D)");
    if (c.shape.batch > 1) {  // strided-batched (Note [Batched GEMM]): cuBLAS's A is our B, its B our A
      const auto count = static_cast<std::int32_t>(c.shape.batch);
      const std::int64_t strides[3] = {gemm_operand_batch_stride(c.mainloop, c.shape, 1),
                                       gemm_operand_batch_stride(c.mainloop, c.shape, 0), c.shape.m * c.shape.n};
      const LtLayout layouts[3] = {a, b, d};
      for (int i = 0; i < 3; ++i) {
        api.check(api.MatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                  "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
        api.check(api.MatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                               sizeof strides[i]),
                  "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
      }
    }

    api.check(api.MatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
    const std::uint64_t workspace = k_workspace_bytes;
    api.check(
        api.MatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                         sizeof workspace),
        "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
  } catch (...) {
    destroy();
    throw;
  }
}

void check_descriptors(CublasLt& lt, const LtMatmulConfig& config) {
  const LtMatmul::Descriptors made(lt.api(), config);
}

LtMatmul::LtMatmul(CublasLt& lt, const LtMatmulConfig& c)
    : lt_(lt), desc_(std::make_unique<Descriptors>(lt.api(), c)) {
  const CublasLt::Api& api = lt.api();
  Descriptors& d = *desc_;
  LtHeuristicResult result{};
  int found = 0;
  api.check(api.MatmulAlgoGetHeuristic(lt.handle(), d.op, d.a, d.b, d.d, d.d, d.preference, 1, &result, &found),
            "cublasLtMatmulAlgoGetHeuristic");
  if (found < 1 || result.state != CUBLAS_STATUS_SUCCESS)
    throw RuntimeError(fmt::format(
        "cuBLASLt has no algorithm for {} x {} x {} {} (A {}, B {}, D {}, epilogue {}{})", c.shape.m, c.shape.n,
        c.shape.k, to_string(c.mainloop.a), to_string(c.mainloop.a_layout), to_string(c.mainloop.b_layout),
        to_string(c.d),
        c.epilogue ? lt_epilogue_name(*c.epilogue) : "CUBLASLT_EPILOGUE_DEFAULT",
        c.epilogue && (*c.epilogue == LtEpilogueKind::relu_bias || *c.epilogue == LtEpilogueKind::gelu_bias)
            ? fmt::format(", bias {}", to_string(c.bias_dtype))
            : std::string()));
  d.algo = result.algo;
  workspace_used_ = result.workspace_size;
  workspace_ = backend::DeviceBuffer(k_workspace_bytes);
}

LtMatmul::~LtMatmul() = default;

void LtMatmul::run(backend::CUdeviceptr a, backend::CUdeviceptr b, backend::CUdeviceptr d,
                   backend::CUstream stream) const {
  const CublasLt::Api& api = lt_.api();
  const float alpha = 1.0f, beta = 0.0f;
  auto ptr = [](backend::CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); };
  // cuBLAS's A is our B and its B our A (column_major_problem); C = D, unread with beta 0.
  api.check(api.Matmul(lt_.handle(), desc_->op, &alpha, ptr(b), desc_->a, ptr(a), desc_->b, &beta, ptr(d),
                       desc_->d, ptr(d), desc_->d, &desc_->algo, ptr(workspace_.ptr()), k_workspace_bytes, stream),
            "cublasLtMatmul");
}

}  // namespace epifuse::baseline
