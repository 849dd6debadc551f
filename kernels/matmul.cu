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
 * Compute type is CUBLAS_COMPUTE_32F on both paths (no TF32).
 *
 * Backward: dinp and dweight are GEMMs with beta = 1, which is exactly the
 * accumulate (+=) semantics of ops.h. dbias is a deterministic column sum
 * (px_cuda_colsum_add, also used by other ops). */
#include <stdint.h>

#include "cuda_common.cuh"

extern "C" {
#include "px_log.h"
}

/* ------------------------------------------------------------ column sums */

/* block (32,32), grid ceil(N/32): out[c] += sum over rows of a[r,c]. */
__global__ void colsum_add_kernel(float *out, const float *a, int M, int N) {
    __shared__ float tile[32][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (c < N)
        for (int r = threadIdx.y; r < M; r += 32) acc += a[(size_t)r * N + c];
    float s = px_column_tree(acc, tile);
    if (threadIdx.y == 0 && c < N) out[c] += s;
}

void px_cuda_colsum_add(float *out, const float *a, int M, int N, cudaStream_t stream) {
    colsum_add_kernel<<<(unsigned)((N + 31) / 32), dim3(32, 32), 0, stream>>>(out, a, M, N);
    PX_CUDA_LAUNCH_CHECK();
}

/* ---------------------------------------------------------------- forward */

/* out (M,N) += bias (N) broadcast over rows. */
__global__ void add_bias_kernel(float *out, const float *bias, int M, int N) {
    size_t n = (size_t)M * N;
    PX_GRID_STRIDE(i, n) { out[i] += bias[i % (size_t)N]; }
}

/* Largest power of two (<= 256, cuBLASLt's default assumption) dividing p. */
static uint32_t alignment_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 4 && (a % al) != 0) al >>= 1;
    return al;
}

/* out = inp @ weight^T + bias through cuBLASLt. Returns 0 when done, -1 when
 * cuBLASLt has no algorithm for these pointers/shapes (nothing was written). */
static int matmul_forward_lt(float *out, const float *inp, const float *weight, const float *bias,
                             int BT, int C, int OC, cudaStream_t stream) {
    cublasLtHandle_t lt = px_cuda_lt();
    size_t ws_bytes = 0;
    void *ws = px_cuda_lt_workspace(&ws_bytes);

    cublasLtMatmulDesc_t desc;
    PX_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    PX_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    PX_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    PX_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    PX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                   sizeof bias));

    /* Stored (column-major) shapes, before the transpose ops. */
    cublasLtMatrixLayout_t la, lb, ld;
    PX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, (uint64_t)C, (uint64_t)OC, C));
    PX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, (uint64_t)C, (uint64_t)BT, C));
    PX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, (uint64_t)OC, (uint64_t)BT, OC));

    cublasLtMatmulPreference_t pref;
    PX_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws64 = ws_bytes;
    uint32_t al_a = alignment_of(weight), al_b = alignment_of(inp), al_d = alignment_of(out);
    PX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws64, sizeof ws64));
    PX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    PX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    PX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
    PX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));

    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &result, &found);
    int done = -1;
    if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
        const float alpha = 1.0f, beta = 0.0f;
        PX_CUBLAS_CHECK(cublasLtMatmul(lt, desc, &alpha, weight, la, inp, lb, &beta, out, ld, out,
                                       ld, &result.algo, ws, ws_bytes, stream));
        done = 0;
    } else if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_SUCCESS) {
        /* Anything but "no algorithm" is unexpected; the fallback still works. */
        px_log_warn("cublaslt_heuristic_failed status=%d error=\"%s\" fallback=sgemm", (int)st,
                    cublasGetStatusString(st));
    }

    PX_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    PX_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(ld));
    PX_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
    PX_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
    PX_CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    return done;
}

extern "C" void matmul_forward_cuda(float *out, const float *inp, const float *weight,
                                    const float *bias, int B, int T, int C, int OC,
                                    cudaStream_t stream) {
    int BT = B * T;
    if (bias && px_cuda_lt_enabled() &&
        matmul_forward_lt(out, inp, weight, bias, BT, C, OC, stream) == 0)
        return;
    const float alpha = 1.0f, beta = 0.0f;
    PX_CUBLAS_CHECK(cublasSgemm(px_cuda_blas(stream), CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, &alpha,
                                weight, C, inp, C, &beta, out, OC));
    if (bias) {
        size_t n = (size_t)BT * OC;
        add_bias_kernel<<<px_grid(n), PX_THREADS, 0, stream>>>(out, bias, BT, OC);
        PX_CUDA_LAUNCH_CHECK();
    }
}

/* --------------------------------------------------------------- backward */

extern "C" void matmul_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                                     const float *inp, const float *weight, int B, int T, int C,
                                     int OC, cudaStream_t stream) {
    int BT = B * T;
    const float one = 1.0f;
    if (dinp) /* dinp (BT,C) += dout (BT,OC) @ weight (OC,C) */
        PX_CUBLAS_CHECK(cublasSgemm(px_cuda_blas(stream), CUBLAS_OP_N, CUBLAS_OP_N, C, BT, OC,
                                    &one, weight, C, dout, OC, &one, dinp, C));
    if (dweight) /* dweight (OC,C) += dout^T (OC,BT) @ inp (BT,C) */
        PX_CUBLAS_CHECK(cublasSgemm(px_cuda_blas(stream), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, BT,
                                    &one, inp, C, dout, OC, &one, dweight, C));
    if (dbias) px_cuda_colsum_add(dbias, dout, BT, OC, stream);
}
