/* Matmul with bias on the GPU (matmul_forward/backward of ops.h) through cuBLAS.
 *
 * Layout: cuBLAS is column-major and ours is row-major, so every row-major
 * (R,K) matrix is read by cuBLAS as its (K,R) transpose. Then
 *   out (BT,OC) = inp (BT,C) @ weight^T   is   out^T = weight^T' op inp^T
 * i.e. sgemm(T, N, m=OC, n=BT, k=C, A=weight lda=C, B=inp ldb=C, C=out ldc=OC),
 * the same three calls llm.c makes.
 *
 * Forward with a bias: cuBLASLt's BIAS epilogue adds the bias inside the GEMM,
 * saving a pass over the output. cuBLASLt picks algorithms by the pointers'
 * alignment, so the preference is told each pointer's real alignment and the
 * heuristic may answer "none"; then (or when disabled with
 * px_cuda_ops_set_lt(0)) the op falls back to cublasSgemm plus a bias kernel.
 * The compute type follows the math mode (px_cuda_ops_set_math): FP32 by
 * default (no TF32), TF32 or bf16 tensor cores with FP32 storage. The
 * bf16-storage overloads (ops_cuda.h) take bf16 operands and write FP32 or
 * bf16, accumulating in FP32. cuBLASLt plans (descriptor, layouts,
 * algorithm) are made once per shape and storage types and kept.
 *
 * Backward: dinp and dweight are GEMMs with beta = 1, which is exactly the
 * accumulate (+=) semantics of ops.h. dbias is a deterministic column sum
 * (px_cuda_colsum_add, also used by other ops). */
#include <stdint.h>
#include <string.h>

#include "cuda_common.cuh"

extern "C" {
#include "px_log.h"
}

/* ------------------------------------------------------------ column sums */

/* Rows per chunk of a column sum: a thread adds COLSUM_ROWS / 32 of them.
 * One block per (32 columns, chunk) keeps the GPU busy on matrices as tall
 * as B*T and as narrow as C (a block per 32 columns alone would be a few
 * dozen blocks, each walking every row). */
#define COLSUM_ROWS 256

/* block (32,32), grid (ceil(N/32), chunks): the sum over the chunk's rows
 * of a[r,c], added to out[c] (one chunk) or stored in part[chunk, c]. */
template <typename S>
__global__ void colsum_chunk_kernel(float *out, float *part, const S *a, int M, int N) {
    __shared__ float tile[32][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * COLSUM_ROWS, r1 = r0 + COLSUM_ROWS < M ? r0 + COLSUM_ROWS : M;
    float acc = 0.0f;
    if (c < N)
        for (int r = r0 + threadIdx.y; r < r1; r += 32) acc += px_ld(a[(size_t)r * N + c]);
    float s = px_column_tree(acc, tile);
    if (threadIdx.y == 0 && c < N) {
        if (part) part[(size_t)blockIdx.y * N + c] = s;
        else out[c] += s;
    }
}

/* out[c] += the chunks' sums of column c, in chunk order. */
__global__ void colsum_finish_kernel(float *out, const float *part, int chunks, int N) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= N) return;
    float s = 0.0f;
    for (int k = 0; k < chunks; k++) s += part[(size_t)k * N + c];
    out[c] += s;
}

template <typename S>
static void colsum_add(float *out, const S *a, int M, int N, cudaStream_t stream) {
    int chunks = M > 0 ? (M + COLSUM_ROWS - 1) / COLSUM_ROWS : 1;
    float *part = chunks > 1 ? (float *)px_cuda_scratch_slot(PX_SCRATCH_COLSUM, (size_t)chunks * N * sizeof(float))
                             : NULL;
    dim3 grid((unsigned)((N + 31) / 32), (unsigned)chunks);
    colsum_chunk_kernel<S><<<grid, dim3(32, 32), 0, stream>>>(out, part, a, M, N);
    PX_CUDA_LAUNCH_CHECK();
    if (!part) return;
    colsum_finish_kernel<<<(unsigned)((N + PX_THREADS - 1) / PX_THREADS), PX_THREADS, 0, stream>>>(out, part, chunks,
                                                                                                    N);
    PX_CUDA_LAUNCH_CHECK();
}

void px_cuda_colsum_add(float *out, const float *a, int M, int N, cudaStream_t stream) {
    colsum_add(out, a, M, N, stream);
}
void px_cuda_colsum_add(float *out, const bf16 *a, int M, int N, cudaStream_t stream) {
    colsum_add(out, a, M, N, stream);
}

/* ---------------------------------------------------------------- forward */

/* out (M,N) += bias (N) broadcast over rows. */
template <typename O>
__global__ void add_bias_kernel(O *out, const O *bias, int M, int N) {
    size_t n = (size_t)M * N;
    PX_GRID_STRIDE(i, n) { px_st(&out[i], px_ld(out[i]) + px_ld(bias[i % (size_t)N])); }
}

/* Largest power of two (<= 256, cuBLASLt's default assumption) dividing p. */
static uint32_t alignment_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 4 && (a % al) != 0) al >>= 1;
    return al;
}

/* What a cuBLASLt plan computes (row-major names; W is (OC,C), x (BT,C)):
 *   LT_BIAS   out (BT,OC) = x W^T + bias
 *   LT_GELU   out = GELU(x W^T + bias), with aux = x W^T + bias (GELU's input)
 *   LT_DGELU  out (BT,C) = (dout (BT,OC) W) * GELU'(aux), aux (BT,C) */
typedef enum { LT_BIAS, LT_GELU, LT_DGELU } lt_kind_t;

/* A cuBLASLt plan for one kind, shape, pointer alignment, storage types and compute type:
 * the descriptor, the three layouts and the heuristic's algorithm (found 0:
 * cuBLASLt has none, the caller falls back). Created on first use and kept:
 * a training step asks for the same few shapes every time. The bias and aux
 * pointers are the attributes set per call. */
typedef struct {
    lt_kind_t kind;
    int BT, C, OC;
    uint32_t al_a, al_b, al_d, al_bias, al_aux;
    cudaDataType_t ab, dt; /* A and B's type, D's (and the bias's and aux's: cuBLASLt's default) */
    cublasComputeType_t compute;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    int found;
} lt_plan_t;

#define LT_PLANS 64
static lt_plan_t g_plans[LT_PLANS];
static int g_nplans, g_next_evict;

static void plan_free(lt_plan_t *p) {
    PX_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->ld));
    PX_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
    PX_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
    PX_CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
}

static void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void *v, size_t n) {
    PX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, v, n));
}

/* The per-call pointers: the bias (not LT_DGELU) and the aux matrix (not LT_BIAS). */
static void set_pointers(const lt_plan_t *p, const void *bias, const void *aux) {
    if (p->kind != LT_DGELU) set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (p->kind != LT_BIAS) set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
}

static void plan_make(lt_plan_t *p, const void *bias, const void *aux) {
    cublasLtHandle_t lt = px_cuda_lt();
    size_t ws_bytes = 0;
    px_cuda_lt_workspace(&ws_bytes);
    PX_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, p->compute, CUDA_R_32F));
    int fwd = p->kind != LT_DGELU;
    cublasOperation_t ta = fwd ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = p->kind == LT_BIAS   ? CUBLASLT_EPILOGUE_BIAS
                             : p->kind == LT_GELU ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                  : CUBLASLT_EPILOGUE_DGELU;
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (p->kind != LT_BIAS) { /* aux has D's shape: its leading dimension is D's rows */
        int64_t aux_ld = fwd ? p->OC : p->C;
        set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    }

    /* Stored (column-major) shapes, before the transpose ops. Forward:
     * A = W as (C x OC), B = x as (C x BT), D (OC x BT). DGELU: A = W as
     * (C x OC), B = dout as (OC x BT), D (C x BT). */
    PX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, p->ab, (uint64_t)p->C, (uint64_t)p->OC, p->C));
    if (fwd) {
        PX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, p->ab, (uint64_t)p->C, (uint64_t)p->BT, p->C));
        PX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, p->dt, (uint64_t)p->OC, (uint64_t)p->BT, p->OC));
    } else {
        PX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, p->ab, (uint64_t)p->OC, (uint64_t)p->BT, p->OC));
        PX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, p->dt, (uint64_t)p->C, (uint64_t)p->BT, p->C));
    }

    cublasLtMatmulPreference_t pref;
    PX_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws64 = ws_bytes;
    PX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws64,
                                                         sizeof ws64));
    PX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                         &p->al_a, sizeof p->al_a));
    PX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                         &p->al_b, sizeof p->al_b));
    PX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                         &p->al_d, sizeof p->al_d));
    PX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                         &p->al_d, sizeof p->al_d));
    /* Asked with this call's pointers; later calls share the plan only with
     * pointers of the same alignment (al_bias and al_aux are in the key). */
    set_pointers(p, bias, aux);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->la, p->lb, p->ld, p->ld, pref, 1, &result,
                                                       &found);
    p->found = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p->found) p->algo = result.algo;
    else if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_SUCCESS)
        /* Anything but "no algorithm" is unexpected; the fallback still works. */
        px_log_warn("cublaslt_heuristic_failed kind=%d status=%d error=\"%s\" fallback=separate_kernels", (int)p->kind,
                    (int)st, cublasGetStatusString(st));
    PX_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
}

/* The compute type for operands of type ab: the math mode's for FP32,
 * plain FP32 accumulation for bf16 (already tensor-core inputs). */
static cublasComputeType_t compute_for(cudaDataType_t ab) {
    return ab == CUDA_R_32F ? px_cuda_compute_type() : CUBLAS_COMPUTE_32F;
}

static const lt_plan_t *plan_for(lt_kind_t kind, int BT, int C, int OC, const void *weight, const void *inp,
                                 const void *out, const void *bias, const void *aux, cudaDataType_t ab,
                                 cudaDataType_t dt) {
    cublasComputeType_t compute = compute_for(ab);
    uint32_t al_a = alignment_of(weight), al_b = alignment_of(inp), al_d = alignment_of(out),
             al_bias = bias ? alignment_of(bias) : 0, al_aux = aux ? alignment_of(aux) : 0;
    for (int i = 0; i < g_nplans; i++) {
        const lt_plan_t *p = &g_plans[i];
        if (p->kind == kind && p->BT == BT && p->C == C && p->OC == OC && p->al_a == al_a && p->al_b == al_b &&
            p->al_d == al_d && p->al_bias == al_bias && p->al_aux == al_aux && p->ab == ab && p->dt == dt &&
            p->compute == compute)
            return p;
    }
    lt_plan_t *p;
    if (g_nplans < LT_PLANS) p = &g_plans[g_nplans++];
    else { /* more shapes than a model has: replace the oldest */
        p = &g_plans[g_next_evict];
        g_next_evict = (g_next_evict + 1) % LT_PLANS;
        plan_free(p);
    }
    memset(p, 0, sizeof *p);
    p->kind = kind, p->BT = BT, p->C = C, p->OC = OC, p->compute = compute;
    p->al_a = al_a, p->al_b = al_b, p->al_d = al_d, p->al_bias = al_bias, p->al_aux = al_aux;
    p->ab = ab, p->dt = dt;
    plan_make(p, bias, aux);
    return p;
}

void px_cuda_lt_plans_free(void) {
    for (int i = 0; i < g_nplans; i++) plan_free(&g_plans[i]);
    g_nplans = 0;
    g_next_evict = 0;
}

/* One plan's matmul (inp: x for the forward kinds, dout for LT_DGELU).
 * Returns 0 when done, -1 when cuBLASLt has no algorithm (the caller falls
 * back to separate kernels). */
static int lt_matmul(lt_kind_t kind, void *out, const void *inp, const void *weight, const void *bias, const void *aux,
                     cudaDataType_t ab, cudaDataType_t dt, int BT, int C, int OC, cudaStream_t stream) {
    const lt_plan_t *p = plan_for(kind, BT, C, OC, weight, inp, out, bias, aux, ab, dt);
    if (!p->found) return -1;
    size_t ws_bytes = 0;
    void *ws = px_cuda_lt_workspace(&ws_bytes);
    set_pointers(p, bias, aux);
    const float alpha = 1.0f, beta = 0.0f;
    PX_CUBLAS_CHECK(cublasLtMatmul(px_cuda_lt(), p->desc, &alpha, weight, p->la, inp, p->lb, &beta, out, p->ld,
                                   out, p->ld, &p->algo, ws, ws_bytes, stream));
    return 0;
}

/* C = alpha op(A) op(B) + beta C, column-major, FP32 storage, in the math
 * mode's compute type: cublasSgemm for FP32 (the path the CPU comparisons
 * were fixed on), cublasGemmEx otherwise. */
void px_cuda_gemm(cudaStream_t stream, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                  float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    px_cuda_gemm_ex(stream, ta, tb, m, n, k, alpha, A, lda, B, ldb, CUDA_R_32F, beta, C, ldc, CUDA_R_32F);
}

void px_cuda_gemm_ex(cudaStream_t stream, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                     float alpha, const void *A, int lda, const void *B, int ldb, cudaDataType_t ab, float beta,
                     void *C, int ldc, cudaDataType_t ct) {
    cublasHandle_t h = px_cuda_blas(stream);
    if (ab == CUDA_R_32F && ct == CUDA_R_32F && px_cuda_ops_math() == PX_CUDA_MATH_FP32) {
        PX_CUBLAS_CHECK(cublasSgemm(h, ta, tb, m, n, k, &alpha, (const float *)A, lda, (const float *)B, ldb, &beta,
                                    (float *)C, ldc));
        return;
    }
    PX_CUBLAS_CHECK(cublasGemmEx(h, ta, tb, m, n, k, &alpha, A, ab, lda, B, ab, ldb, &beta, C, ct, ldc,
                                 compute_for(ab), CUBLAS_GEMM_DEFAULT));
}

void px_cuda_gemm_batched(cudaStream_t stream, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                          float alpha, const float *A, int lda, long long sa, const float *B, int ldb,
                          long long sb, float beta, float *C, int ldc, long long sc, int batch) {
    px_cuda_gemm_batched_ex(stream, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, CUDA_R_32F, beta, C, ldc, sc,
                            batch);
}

void px_cuda_gemm_batched_ex(cudaStream_t stream, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                             float alpha, const void *A, int lda, long long sa, const void *B, int ldb, long long sb,
                             cudaDataType_t t, float beta, void *C, int ldc, long long sc, int batch) {
    cublasHandle_t h = px_cuda_blas(stream);
    if (t == CUDA_R_32F && px_cuda_ops_math() == PX_CUDA_MATH_FP32) {
        PX_CUBLAS_CHECK(cublasSgemmStridedBatched(h, ta, tb, m, n, k, &alpha, (const float *)A, lda, sa,
                                                  (const float *)B, ldb, sb, &beta, (float *)C, ldc, sc, batch));
        return;
    }
    PX_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha, A, t, lda, sa, B, t, ldb, sb, &beta, C, t,
                                               ldc, sc, batch, compute_for(t), CUBLAS_GEMM_DEFAULT));
}

/* The ops below are templates over the storage: I the operands' type (x
 * and W, or dout and W), O the output's (and the bias's). The FP32 ops are
 * I = O = float. */

template <typename I, typename O>
static void forward(O *out, const I *inp, const I *weight, const O *bias, int BT, int C, int OC,
                    cudaStream_t stream) {
    cudaDataType_t ab = px_data_type<I>(), dt = px_data_type<O>();
    if (bias && px_cuda_lt_enabled() &&
        lt_matmul(LT_BIAS, out, inp, weight, bias, NULL, ab, dt, BT, C, OC, stream) == 0)
        return;
    px_cuda_gemm_ex(stream, CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, 1.0f, weight, C, inp, C, ab, 0.0f, out, OC, dt);
    if (bias) {
        size_t n = (size_t)BT * OC;
        add_bias_kernel<O><<<px_grid(n), PX_THREADS, 0, stream>>>(out, bias, BT, OC);
        PX_CUDA_LAUNCH_CHECK();
    }
}

extern "C" void matmul_forward_cuda(float *out, const float *inp, const float *weight,
                                    const float *bias, int B, int T, int C, int OC,
                                    cudaStream_t stream) {
    forward(out, inp, weight, bias, B * T, C, OC, stream);
}
void matmul_forward_cuda(bf16 *out, const bf16 *inp, const bf16 *weight, const bf16 *bias, int B, int T, int C, int OC,
                         cudaStream_t stream) {
    forward(out, inp, weight, bias, B * T, C, OC, stream);
}
void matmul_forward_cuda(float *out, const bf16 *inp, const bf16 *weight, const float *bias, int B, int T, int C,
                         int OC, cudaStream_t stream) {
    forward(out, inp, weight, bias, B * T, C, OC, stream);
}

/* --------------------------------------------------------------- backward */

/* For the output gradient scale * dout: dinp = dinp_beta * dinp + .. @ weight
 * (so dinp_beta 1 accumulates, 0 overwrites); dweight and dbias (FP32)
 * accumulate. */
template <typename I, typename O>
static void backward(O *dinp, float dinp_beta, float *dweight, float *dbias, const I *dout, float scale,
                     const I *inp, const I *weight, int BT, int C, int OC, cudaStream_t stream) {
    cudaDataType_t ab = px_data_type<I>();
    if (dinp) /* dinp (BT,C) = scale dout (BT,OC) @ weight (OC,C) + beta dinp */
        px_cuda_gemm_ex(stream, CUBLAS_OP_N, CUBLAS_OP_N, C, BT, OC, scale, weight, C, dout, OC, ab, dinp_beta, dinp,
                        C, px_data_type<O>());
    if (dweight) /* dweight (OC,C) += scale dout^T (OC,BT) @ inp (BT,C) */
        px_cuda_gemm_ex(stream, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, BT, scale, inp, C, dout, OC, ab, 1.0f, dweight, C,
                        CUDA_R_32F);
    if (dbias) {
        if (scale != 1.0f)
            px_cuda_fail(__FILE__, __LINE__, "matmul_backward_set_cuda", "cuda", 0,
                         "a bias gradient of a scaled output gradient is not supported");
        px_cuda_colsum_add(dbias, dout, BT, OC, stream);
    }
}

extern "C" void matmul_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                                     const float *inp, const float *weight, int B, int T, int C,
                                     int OC, cudaStream_t stream) {
    backward(dinp, 1.0f, dweight, dbias, dout, 1.0f, inp, weight, B * T, C, OC, stream);
}
void matmul_backward_cuda(float *dinp, float *dweight, float *dbias, const bf16 *dout, const bf16 *inp,
                          const bf16 *weight, int B, int T, int C, int OC, cudaStream_t stream) {
    backward(dinp, 1.0f, dweight, dbias, dout, 1.0f, inp, weight, B * T, C, OC, stream);
}

extern "C" void matmul_backward_set_cuda(float *dinp, float *dweight, float *dbias, const float *dout, float scale,
                                         const float *inp, const float *weight, int B, int T, int C, int OC,
                                         cudaStream_t stream) {
    backward(dinp, 0.0f, dweight, dbias, dout, scale, inp, weight, B * T, C, OC, stream);
}
void matmul_backward_set_cuda(float *dinp, float *dweight, float *dbias, const bf16 *dout, float scale,
                              const bf16 *inp, const bf16 *weight, int B, int T, int C, int OC, cudaStream_t stream) {
    backward(dinp, 0.0f, dweight, dbias, dout, scale, inp, weight, B * T, C, OC, stream);
}
void matmul_backward_set_cuda(bf16 *dinp, float *dweight, float *dbias, const bf16 *dout, float scale,
                              const bf16 *inp, const bf16 *weight, int B, int T, int C, int OC, cudaStream_t stream) {
    backward(dinp, 0.0f, dweight, dbias, dout, scale, inp, weight, B * T, C, OC, stream);
}

template <typename X>
static void forward_gelu(X *out, X *pre, const X *inp, const X *weight, const X *bias, int B, int T, int C, int OC,
                         cudaStream_t stream) {
    int BT = B * T;
    cudaDataType_t t = px_data_type<X>();
    if (px_cuda_lt_enabled() && lt_matmul(LT_GELU, out, inp, weight, bias, pre, t, t, BT, C, OC, stream) == 0) return;
    forward(pre, inp, weight, bias, BT, C, OC, stream);
    gelu_forward_cuda(out, pre, (size_t)BT * OC, stream);
}

extern "C" void matmul_forward_gelu_cuda(float *out, float *pre, const float *inp, const float *weight,
                                         const float *bias, int B, int T, int C, int OC, cudaStream_t stream) {
    forward_gelu(out, pre, inp, weight, bias, B, T, C, OC, stream);
}
void matmul_forward_gelu_cuda(bf16 *out, bf16 *pre, const bf16 *inp, const bf16 *weight, const bf16 *bias, int B,
                              int T, int C, int OC, cudaStream_t stream) {
    forward_gelu(out, pre, inp, weight, bias, B, T, C, OC, stream);
}

template <typename X>
static void backward_dgelu(X *dinp, const X *dout, const X *pre, const X *weight, int B, int T, int C, int OC,
                           cudaStream_t stream) {
    int BT = B * T;
    cudaDataType_t t = px_data_type<X>();
    if (px_cuda_lt_enabled() && lt_matmul(LT_DGELU, dinp, dout, weight, NULL, pre, t, t, BT, C, OC, stream) == 0)
        return;
    backward(dinp, 0.0f, (float *)NULL, (float *)NULL, dout, 1.0f, (const X *)NULL, weight, BT, C, OC, stream);
    gelu_backward_inplace_cuda(dinp, pre, (size_t)BT * C, stream);
}

extern "C" void matmul_backward_dgelu_cuda(float *dinp, const float *dout, const float *pre, const float *weight,
                                           int B, int T, int C, int OC, cudaStream_t stream) {
    backward_dgelu(dinp, dout, pre, weight, B, T, C, OC, stream);
}
void matmul_backward_dgelu_cuda(bf16 *dinp, const bf16 *dout, const bf16 *pre, const bf16 *weight, int B, int T,
                                int C, int OC, cudaStream_t stream) {
    backward_dgelu(dinp, dout, pre, weight, B, T, C, OC, stream);
}
