// cuBLASLt GEMMs with epilogues (cublaslt_impl.h): handles, workspaces and cached plans.
//
// Note [cuBLASLt plans]: as Note [cuBLAS handles] (matmul.cu), one context per (thread, device,
// stream), created on first use and kept in a thread_local cache, destroyed when the thread
// exits; no global mutable state, no lock. A context holds
//   - a cuBLASLt handle (not bound to a stream: cublasLtMatmul takes the stream per call);
//   - a workspace of kWorkspaceBytes, cudaMalloc'ed once. It is used only by GEMMs enqueued on
//     the context's stream, which run in order, so two GEMMs never share it at the same time;
//     cudaFree at thread exit (cudaFree waits for the device's work).
//   - the plans: per problem (shapes, leading dimensions, transposes, dtype, epilogue, and the
//     alignment of every pointer, which cuBLASLt's heuristic takes into account) the matmul
//     and layout descriptors and the algorithm the heuristic ranked first, or the answer that
//     there is none. A problem is looked up, never re-planned: the same problem runs the same
//     algorithm with the same workspace size on every call, hence the same bits. (cuBLAS
//     documents bitwise reproducibility for one toolkit on GPUs of one architecture and SM
//     count, and names cublasLtMatmul with a user-owned workspace per stream as the way to keep
//     it with concurrent streams; every split-K reduction scheme of cublasLt.h is sequential
//     or a separate pass. test_fused_cuda checks it, on one stream and across two.)
// Descriptors are read by cublasLtMatmul when it enqueues, so setting a plan's bias / aux
// pointers for the next call while earlier GEMMs still run is safe.
#include <cublasLt.h>

#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/cublaslt_impl.h"

#define LT_CHECK(expr)                                                                      \
  do {                                                                                      \
    cublasStatus_t strata_lt_rc_ = (expr);                                                  \
    if (strata_lt_rc_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                \
      ::strata::detail::throw_gpu_error("cuBLASLt", #expr, cublasLtGetStatusName(strata_lt_rc_), \
                                        cublasLtGetStatusString(strata_lt_rc_), __FILE__,  \
                                        __LINE__);                                          \
  } while (0)

namespace strata::kernels::cuda::detail {
namespace {

// NVIDIA's recommendation for Hopper; enough for every split-K scheme at GPT-2 sizes.
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;
constexpr unsigned kMaxAlignment = 256;  // the heuristic's default assumption

// The largest power of two (<= 256 bytes) that divides the address; 256 for null.
unsigned alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  unsigned al = 1;
  while (al < kMaxAlignment && (a & al) == 0) al <<= 1;
  return al;
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
  }
  STRATA_ASSERT(false, "lt_gemm: dtype is not a DType");
}

// The cuBLASLt epilogue: the "_AUX_BIAS" / "_BGRAD" forms only when a bias / bias gradient is
// given.
cublasLtEpilogue_t lt_epilogue(const LtGemm& g) {
  switch (g.epilogue) {
    case LtEpilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
    case LtEpilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::gelu_aux_bias:
      return g.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case LtEpilogue::dgelu_bgrad:
      return g.bias_grad != nullptr ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    case LtEpilogue::bgrad_b: return CUBLASLT_EPILOGUE_BGRADB;
  }
  STRATA_ASSERT(false, "lt_gemm: unknown epilogue");
}

bool uses_bias_pointer(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADB;
}

bool uses_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

// Everything the heuristic's answer depends on.
struct PlanKey {
  cublasLtEpilogue_t epilogue;
  DType dtype;
  bool trans_a, trans_b, accumulate;
  int m, n, k, lda, ldb, ldd, ldaux;
  unsigned align_a, align_b, align_d, align_bias, align_aux;
  auto fields() const {
    return std::tie(epilogue, dtype, trans_a, trans_b, accumulate, m, n, k, lda, ldb, ldd, ldaux,
                    align_a, align_b, align_d, align_bias, align_aux);
  }
  bool operator==(const PlanKey& o) const { return fields() == o.fields(); }  // C++17: no = default
};

PlanKey key_of(const LtGemm& g, cublasLtEpilogue_t e) {
  const void* bias_ptr = g.bias_grad != nullptr ? g.bias_grad : g.bias;
  return PlanKey{e,
                 g.dtype,
                 g.trans_a,
                 g.trans_b,
                 g.beta != 0.0f,
                 g.m,
                 g.n,
                 g.k,
                 g.lda,
                 g.ldb,
                 g.ldd,
                 uses_aux(e) ? g.ldaux : 0,
                 alignment_of(g.A),
                 alignment_of(g.B),
                 alignment_of(g.D),
                 uses_bias_pointer(e) ? alignment_of(bias_ptr) : kMaxAlignment,
                 uses_aux(e) ? alignment_of(g.aux) : kMaxAlignment};
}

struct DescDeleter {
  void operator()(cublasLtMatmulDesc_t d) const { static_cast<void>(cublasLtMatmulDescDestroy(d)); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayout_t l) const {
    static_cast<void>(cublasLtMatrixLayoutDestroy(l));
  }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreference_t p) const {
    static_cast<void>(cublasLtMatmulPreferenceDestroy(p));
  }
};
using DescPtr = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using LayoutPtr = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using PreferencePtr = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter>;

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  LT_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

template <typename T>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
              const T& value) {
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

// A column-major (rows, cols) matrix with leading dimension ld.
LayoutPtr make_layout(DType dtype, int rows, int cols, int ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  LT_CHECK(cublasLtMatrixLayoutCreate(&layout, cuda_type(dtype), static_cast<std::uint64_t>(rows),
                                      static_cast<std::uint64_t>(cols), ld));
  return LayoutPtr(layout);
}

// The per-call pointers of the epilogue.
void set_epilogue_pointers(cublasLtMatmulDesc_t desc, const LtGemm& g, cublasLtEpilogue_t e) {
  if (uses_bias_pointer(e)) {
    const void* bias_ptr = g.bias_grad != nullptr ? static_cast<const void*>(g.bias_grad) : g.bias;
    set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr);
  }
  if (uses_aux(e)) set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
}

// The statuses by which cuBLASLt refuses a problem before doing anything (argument checks):
// the op then runs unfused instead of failing.
bool declines(cublasStatus_t rc) {
  return rc == CUBLAS_STATUS_NOT_SUPPORTED || rc == CUBLAS_STATUS_INVALID_VALUE;
}

struct Plan {
  PlanKey key;
  bool supported = false;
  DescPtr desc;
  LayoutPtr a, b, d;  // d serves as C too
  cublasLtMatmulAlgo_t algo{};
};

std::unique_ptr<Plan> make_plan(cublasLtHandle_t handle, const LtGemm& g, const PlanKey& key) {
  auto plan = std::make_unique<Plan>();
  plan->key = key;
  const cublasLtEpilogue_t e = key.epilogue;

  cublasLtMatmulDesc_t desc = nullptr;
  LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  plan->desc.reset(desc);
  const std::int32_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const std::int32_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<std::uint32_t>(e));
  if (uses_aux(e)) set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, std::int64_t{g.ldaux});
  // Bias, bias gradient and aux stay in the output type (the defaults, -1): the storage dtype.
  set_epilogue_pointers(desc, g, e);  // the heuristic reads their alignment

  // Stored shapes: op(A) is (m,k), so A is (k,m) when transposed; op(B) is (k,n).
  plan->a = g.trans_a ? make_layout(g.dtype, g.k, g.m, g.lda)
                      : make_layout(g.dtype, g.m, g.k, g.lda);
  plan->b = g.trans_b ? make_layout(g.dtype, g.n, g.k, g.ldb)
                      : make_layout(g.dtype, g.k, g.n, g.ldb);
  plan->d = make_layout(g.dtype, g.m, g.n, g.ldd);

  cublasLtMatmulPreference_t pref_raw = nullptr;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref_raw));
  const PreferencePtr pref(pref_raw);
  set_pref(pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, std::uint64_t{kWorkspaceBytes});
  // The heuristic assumes 256-byte aligned A, B, C, D unless told: tell it what they are.
  set_pref(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, std::uint32_t{key.align_a});
  set_pref(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, std::uint32_t{key.align_b});
  set_pref(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, std::uint32_t{key.align_d});
  set_pref(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, std::uint32_t{key.align_d});

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t rc =
      cublasLtMatmulAlgoGetHeuristic(handle, desc, plan->a.get(), plan->b.get(), plan->d.get(),
                                     plan->d.get(), pref_raw, 1, &result, &found);
  // No algorithm (NOT_SUPPORTED), or a combination this cuBLASLt refuses (INVALID_VALUE):
  // supported stays false and the op takes its unfused path.
  if (declines(rc)) return plan;
  LT_CHECK(rc);
  if (found < 1 || result.state != CUBLAS_STATUS_SUCCESS || result.workspaceSize > kWorkspaceBytes)
    return plan;
  plan->algo = result.algo;
  plan->supported = true;
  return plan;
}

// One (device, stream)'s handle, workspace and plans.
struct Context {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::vector<std::unique_ptr<Plan>> plans;

  Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context() {
    plans.clear();  // descriptors before the handle
    // At process exit the CUDA runtime may already be gone; nothing useful to do on failure.
    if (workspace != nullptr) static_cast<void>(cudaFree(workspace));
    if (handle != nullptr) static_cast<void>(cublasLtDestroy(handle));
  }

  Plan& plan_for(const LtGemm& g, cublasLtEpilogue_t e) {
    const PlanKey key = key_of(g, e);
    for (const auto& p : plans)
      if (p->key == key) return *p;
    plans.push_back(make_plan(handle, g, key));
    return *plans.back();
  }
};

class ContextCache {
 public:
  ContextCache() = default;
  ContextCache(const ContextCache&) = delete;
  ContextCache& operator=(const ContextCache&) = delete;

  Context& get(cudaStream_t stream) {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    for (const auto& c : contexts_)
      if (c->device == device && c->stream == stream) return *c;
    auto c = std::make_unique<Context>();  // its destructor frees what follows on a throw
    c->device = device;
    c->stream = stream;
    LT_CHECK(cublasLtCreate(&c->handle));
    CUDA_CHECK(cudaMalloc(&c->workspace, kWorkspaceBytes));
    contexts_.push_back(std::move(c));
    return *contexts_.back();
  }

 private:
  std::vector<std::unique_ptr<Context>> contexts_;
};

thread_local std::uint64_t t_declined = 0;  // lt_gemm calls that returned false, this thread

}  // namespace

std::uint64_t lt_declined_count() { return t_declined; }

bool lt_gemm(const LtGemm& g, cudaStream_t stream) {
  STRATA_ASSERT(g.m > 0 && g.n > 0 && g.k > 0, "lt_gemm: empty problem");
  STRATA_ASSERT(g.A != nullptr && g.B != nullptr && g.D != nullptr);
  const cublasLtEpilogue_t e = lt_epilogue(g);
  STRATA_ASSERT(!uses_aux(e) || (g.aux != nullptr && g.ldaux >= g.m),
                "lt_gemm: a GELU epilogue needs aux with ldaux >= m");
  STRATA_ASSERT(e != CUBLASLT_EPILOGUE_BGRADB || g.bias_grad != nullptr,
                "lt_gemm: bgrad_b needs bias_grad");
  STRATA_ASSERT(e != CUBLASLT_EPILOGUE_BIAS || g.bias != nullptr, "lt_gemm: bias needs bias");
  // cuBLASLt's rule for the GELU input's leading dimension (cublasLt.h, EPILOGUE_AUX_LD).
  if (uses_aux(e) && g.ldaux % 8 != 0) {
    ++t_declined;
    return false;
  }

  thread_local ContextCache cache;
  Context& ctx = cache.get(stream);
  Plan& plan = ctx.plan_for(g, e);
  if (!plan.supported) {
    ++t_declined;
    return false;
  }
  set_epilogue_pointers(plan.desc.get(), g, e);
  const float alpha = 1.0f;
  const cublasStatus_t rc =
      cublasLtMatmul(ctx.handle, plan.desc.get(), &alpha, g.A, plan.a.get(), g.B, plan.b.get(),
                     &g.beta, g.D, plan.d.get(), g.D, plan.d.get(), &plan.algo, ctx.workspace,
                     kWorkspaceBytes, stream);
  if (declines(rc)) {
    // Refused at its argument checks, before any launch: the problem is marked unsupported,
    // so this call and every later one run unfused (one path, the same bits every time).
    plan.supported = false;
    ++t_declined;
    return false;
  }
  LT_CHECK(rc);
  return true;
}

}  // namespace strata::kernels::cuda::detail
