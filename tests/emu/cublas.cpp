/* cuBLAS and cuBLASLt for the kernel emulator (include/cublas_v2.h,
 * include/cublasLt.h): every GEMM as the plain triple loop of its definition,
 * column-major, C = alpha op(A) op(B) + beta C (C not read when beta is 0,
 * as cuBLAS does), sums in float in k order. The compute type is honoured
 * where it changes the numbers: FAST_16BF rounds each input element to
 * bf16 and FAST_TF32 to TF32 (nearest even) before the product, which is
 * what the tensor cores see; the sum stays FP32. The GELU epilogues use
 * the tanh form, GELU(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
 * in float. The bias and the aux matrix have D's type, cuBLASLt's default
 * (a bf16 aux is rounded when stored, as D is). Speed is not modelled. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cublasLt.h"
#include "cublas_v2.h"

namespace {
float round_bits(float x, int drop) { /* keep 23 - drop mantissa bits, nearest even; NaN and inf pass */
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7F800000u) == 0x7F800000u) return x;
    uint32_t half = (1u << (drop - 1)) - 1u;
    u += half + ((u >> drop) & 1u);
    u &= ~((1u << drop) - 1u);
    memcpy(&x, &u, sizeof x);
    return x;
}

float as_input(float x, cublasComputeType_t compute) {
    switch (compute) {
    case CUBLAS_COMPUTE_32F_FAST_16BF: return round_bits(x, 16);
    case CUBLAS_COMPUTE_32F_FAST_TF32: return round_bits(x, 13);
    default: return x;
    }
}

float load(const void *p, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void store(void *p, cudaDataType_t t, size_t i, float v) {
    if (t == CUDA_R_32F) {
        ((float *)p)[i] = v;
        return;
    }
    float r = round_bits(v, 16);
    uint32_t u;
    memcpy(&u, &r, sizeof u);
    ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
}

struct gemm_t {
    cublasOperation_t ta, tb;
    int m, n, k;
    float alpha, beta;
    const void *A;
    cudaDataType_t at;
    long long lda;
    const void *B;
    cudaDataType_t bt;
    long long ldb;
    const void *C; /* read when beta != 0 */
    void *D;
    cudaDataType_t dt;
    long long ldc, ldd;
    cublasComputeType_t compute;
    const void *bias; /* per row of D (D's type), or NULL */
    int epilogue;     /* 0 none, 1 GELU (aux = its input), 2 GELU' (aux: the input) */
    void *aux;        /* D's type */
    long long ldaux;
};

float gelu_tanh(float x) {
    const float k = 0.7978845608f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

float gelu_tanh_grad(float x) {
    const float k = 0.7978845608f;
    float u = k * (x + 0.044715f * x * x * x), t = tanhf(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

cublasStatus_t run_gemm(const gemm_t &g) {
    if (g.m < 0 || g.n < 0 || g.k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    /* op(A) by rows and op(B) by columns, as the tensor cores would see them */
    std::vector<float> a((size_t)g.m * g.k), b((size_t)g.n * g.k);
    for (int i = 0; i < g.m; i++)
        for (int l = 0; l < g.k; l++) {
            size_t ai = g.ta == CUBLAS_OP_N ? (size_t)i + (size_t)l * g.lda : (size_t)l + (size_t)i * g.lda;
            a[(size_t)i * g.k + l] = as_input(load(g.A, g.at, ai), g.compute);
        }
    for (int j = 0; j < g.n; j++)
        for (int l = 0; l < g.k; l++) {
            size_t bi = g.tb == CUBLAS_OP_N ? (size_t)l + (size_t)j * g.ldb : (size_t)j + (size_t)l * g.ldb;
            b[(size_t)j * g.k + l] = as_input(load(g.B, g.bt, bi), g.compute);
        }
    for (int j = 0; j < g.n; j++)
        for (int i = 0; i < g.m; i++) {
            const float *ar = a.data() + (size_t)i * g.k, *bc = b.data() + (size_t)j * g.k;
            float acc = 0.0f;
            for (int l = 0; l < g.k; l++) acc += ar[l] * bc[l];
            float v = g.alpha * acc;
            if (g.beta != 0.0f) v += g.beta * load(g.C, g.dt, (size_t)i + (size_t)j * g.ldc);
            if (g.bias) v += load(g.bias, g.dt, (size_t)i);
            size_t ai = (size_t)i + (size_t)j * g.ldaux;
            if (g.epilogue == 1) {
                store(g.aux, g.dt, ai, v);
                v = gelu_tanh(v);
            }
            if (g.epilogue == 2) v *= gelu_tanh_grad(load(g.aux, g.dt, ai));
            store(g.D, g.dt, (size_t)i + (size_t)j * g.ldd, v);
        }
    return CUBLAS_STATUS_SUCCESS;
}

size_t elem_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

struct desc_t {
    cublasComputeType_t compute;
    cublasOperation_t ta, tb;
    cublasLtEpilogue_t epilogue;
    const void *bias;
    void *aux;
    int64_t aux_ld;
};
struct layout_t {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
} // namespace

struct px_emu_cublas {
    int unused;
};
struct px_emu_cublaslt {
    int unused;
};
struct px_emu_lt_desc : desc_t {};
struct px_emu_lt_layout : layout_t {};
struct px_emu_lt_pref {
    int unused;
};

extern "C" {
const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "an emulated cuBLAS error";
    }
}
cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = new px_emu_cublas();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetAtomicsMode(cublasHandle_t, cublasAtomicsMode_t) { return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType_t at, int lda,
                                          long long sa, const void *B, cudaDataType_t bt, int ldb, long long sb,
                                          const void *beta, void *C, cudaDataType_t ct, int ldc, long long sc,
                                          int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
    for (int i = 0; i < batch; i++) {
        gemm_t g = {ta, tb, m, n, k, *(const float *)alpha, *(const float *)beta,
                    (const char *)A + (size_t)i * sa * elem_bytes(at), at, lda,
                    (const char *)B + (size_t)i * sb * elem_bytes(bt), bt, ldb,
                    (char *)C + (size_t)i * sc * elem_bytes(ct), (char *)C + (size_t)i * sc * elem_bytes(ct), ct,
                    ldc, ldc, compute, NULL, 0, NULL, 0};
        cublasStatus_t st = run_gemm(g);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0,
                                      1, compute, algo);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long sa,
                                         const float *B, int ldb, long long sb, const float *beta, float *C, int ldc,
                                         long long sc, int batch) {
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb,
                                      beta, C, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc) {
    return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

/* ---- cuBLASLt ---- */

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = new px_emu_cublaslt();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t) {
    *d = new px_emu_lt_desc();
    (*d)->compute = compute;
    (*d)->ta = (*d)->tb = CUBLAS_OP_N;
    (*d)->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    (*d)->bias = NULL;
    (*d)->aux = NULL;
    (*d)->aux_ld = 0;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
    void *dst = NULL;
    size_t want = 0;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: dst = &d->ta, want = sizeof d->ta; break;
    case CUBLASLT_MATMUL_DESC_TRANSB: dst = &d->tb, want = sizeof d->tb; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: dst = &d->epilogue, want = sizeof d->epilogue; break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: dst = &d->bias, want = sizeof d->bias; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: dst = &d->aux, want = sizeof d->aux; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: dst = &d->aux_ld, want = sizeof d->aux_ld; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (size != want) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(dst, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    if (ld < (int64_t)rows) return CUBLAS_STATUS_INVALID_VALUE;
    *l = new px_emu_lt_layout();
    (*l)->type = type, (*l)->rows = rows, (*l)->cols = cols, (*l)->ld = ld;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new px_emu_lt_pref();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                    const void *, size_t) {
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t dl,
                                              cublasLtMatmulPreference_t, int want,
                                              cublasLtMatmulHeuristicResult_t *results, int *found) {
    if (want < 1) return CUBLAS_STATUS_INVALID_VALUE;
    memset(results, 0, sizeof *results);
    *found = 0;
    int aux = d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d->epilogue == CUBLASLT_EPILOGUE_DGELU;
    if (aux && (d->aux_ld % 8 != 0 || d->aux_ld < (int64_t)dl->rows)) return CUBLAS_STATUS_NOT_SUPPORTED;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
                              const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t) {
    int m = (int)dl->rows, n = (int)dl->cols;
    int k = (int)(d->ta == CUBLAS_OP_N ? a->cols : a->rows);
    int ka = (int)(d->tb == CUBLAS_OP_N ? b->rows : b->cols);
    int ma = (int)(d->ta == CUBLAS_OP_N ? a->rows : a->cols), nb = (int)(d->tb == CUBLAS_OP_N ? b->cols : b->rows);
    if (k != ka || m != ma || n != nb || c->rows != dl->rows || c->cols != dl->cols) return CUBLAS_STATUS_INVALID_VALUE;
    int epi = d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? 1 : d->epilogue == CUBLASLT_EPILOGUE_DGELU ? 2 : 0;
    int with_bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && !with_bias && !epi) return CUBLAS_STATUS_NOT_SUPPORTED;
    if ((with_bias && !d->bias) || (epi && (!d->aux || d->aux_ld < m || d->aux_ld % 8 != 0)))
        return CUBLAS_STATUS_INVALID_VALUE; /* as documented: the aux leading dimension a multiple of 8, >= rows */
    gemm_t g = {d->ta, d->tb, m, n, k, *(const float *)alpha, *(const float *)beta, A, a->type, a->ld, B, b->type,
                b->ld, C, D, dl->type, c->ld, dl->ld, d->compute, with_bias ? d->bias : NULL, epi, d->aux,
                d->aux_ld};
    return run_gemm(g);
}
}
