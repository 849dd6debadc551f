/* Fused causal attention on tensor cores (flash_attention_*_cuda of
 * ops_cuda.h): FlashAttention-2's algorithm, written for this project.
 *
 * Forward, one thread block per (64-query tile, batch x head): the query
 * tile stays in shared memory while the key/value tiles at or before it
 * stream through; the scores of a tile are formed on bf16 tensor cores
 * (wmma 16x16x16, FP32 accumulation), the softmax is online (a running row
 * maximum and sum in FP32; the output, held in registers, rescaled when the
 * maximum grows by more than a margin), and the probabilities, rounded to
 * bf16, multiply V into the FP32 output.
 * What the backward keeps of a row is its log-sum-exp, so memory is
 * O(B*NH*T): no (B,NH,T,T) tensor ever exists.
 *
 * Backward, three kernels and no atomics, so that every gradient element has
 * one summation order (groups stay bitwise identical):
 *   1. D = rowsum(dO * O) per query row;
 *   2. per key tile: P and dP recomputed for every query tile at or after
 *      it, dV += P^T dO and dK += dS^T Q kept in registers;
 *   3. per query tile: P and dP recomputed for every key tile at or before
 *      it, dQ += dS K;
 * with dS = P * (dP - D). Recomputing P twice costs FLOPs, not memory.
 *
 * Each of a block's four warps owns 16 rows of the block's tile: its scores,
 * probabilities and output rows are touched by no other warp, so inside a
 * tile only the warp synchronizes; the block synchronizes around loading
 * the shared K/V (or Q/dO) tiles.
 *
 * Head sizes 16, 32, 64 and 128 (a template each); sm_80 and newer. The
 * unfused path (attention.cu) serves everything else. */
#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

#include "cuda_common.cuh"

using namespace nvcuda;

#define FA_TILE 64 /* rows of a query tile and of a key/value tile */
#define FA_WARPS 4 /* each owns 16 rows of its block's tile */
#define FA_THREADS (FA_WARPS * 32)

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_t;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a_row_t;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b_row_t;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b_col_t;

/* FA_TILE rows of D from src (row t at src + t*stride, FP32 or bf16) into
 * dst (row-major, bf16); rows at or past T are zeros. All threads of the
 * block take part. */
template <int D, typename X>
__device__ void load_tile(bf16 *dst, const X *src, size_t stride, int t0, int T) {
    for (int i = threadIdx.x; i < FA_TILE * D; i += FA_THREADS) {
        int r = i / D, d = i - r * D, t = t0 + r;
        dst[i] = __float2bfloat16(t < T ? px_ld(src[(size_t)t * stride + d]) : 0.0f);
    }
}

/* Eight bf16, moved as one 16-byte access. */
struct __align__(16) bf16x8 {
    bf16 v[8];
};

/* The same from bf16: 16 bytes a thread at a time where the rows are
 * 16-byte aligned (they are in the model: D and C multiples of 8), else
 * element by element. */
template <int D>
__device__ void load_tile(bf16 *dst, const bf16 *src, size_t stride, int t0, int T) {
    if (((uintptr_t)src & 15) != 0 || (stride & 7) != 0) {
        load_tile<D, bf16>(dst, src, stride, t0, T);
        return;
    }
    for (int i = threadIdx.x; i < FA_TILE * D / 8; i += FA_THREADS) {
        int r = i / (D / 8), c = i - r * (D / 8), t = t0 + r;
        bf16x8 v;
        if (t < T) {
            v = *(const bf16x8 *)(src + (size_t)t * stride + 8 * c);
        } else {
            for (int k = 0; k < 8; k++) v.v[k] = __float2bfloat16(0.0f);
        }
        *(bf16x8 *)(dst + r * D + 8 * c) = v;
    }
}

/* out (16 x FA_TILE, FP32, row-major, ld FA_TILE) = A (16 x D) B^T, with A
 * the 16 rows at a and B the FA_TILE rows at b (both row-major, ld D, bf16):
 * the scores of a warp's rows against a tile. */
template <int D>
__device__ void rows_times_tile_t(float *out, const bf16 *a, const bf16 *b) {
    for (int n0 = 0; n0 < FA_TILE; n0 += 16) {
        acc_t acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < D; kk += 16) {
            a_row_t fa;
            b_col_t fb; /* B^T read column-major: element (k, n) at b[n*D + k] */
            wmma::load_matrix_sync(fa, a + kk, D);
            wmma::load_matrix_sync(fb, b + (size_t)n0 * D + kk, D);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(out + n0, acc, FA_TILE, wmma::mem_row_major);
    }
}

/* acc[j] (16 x 16, columns 16j..) += A (16 x FA_TILE at a, ld FA_TILE) B
 * (FA_TILE x D at b, ld D), all bf16 row-major. */
template <int D>
__device__ void rows_times_tile_acc(acc_t *acc, const bf16 *a, const bf16 *b) {
#pragma unroll
    for (int j = 0; j < D / 16; j++)
#pragma unroll
        for (int kk = 0; kk < FA_TILE; kk += 16) {
            a_row_t fa;
            b_row_t fb;
            wmma::load_matrix_sync(fa, a + kk, FA_TILE);
            wmma::load_matrix_sync(fb, b + (size_t)kk * D + 16 * j, D);
            wmma::mma_sync(acc[j], fa, fb, acc[j]);
        }
}

/* dst rows (16 of a warp, heads' columns at h*D) += scale * acc (or =, when
 * not accumulate) through a warp's 16 x D FP32 staging area; rows at or
 * past T are skipped. */
template <int D, typename X>
__device__ void add_rows(X *dst, size_t stride, int t0, int T, acc_t *acc, float *stage, float scale,
                         int accumulate) {
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < D / 16; j++) wmma::store_matrix_sync(stage + 16 * j, acc[j], D, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 16 * D; i += 32) {
        int r = i / D, d = i - r * D, t = t0 + r;
        if (t < T) {
            float v = scale * stage[i];
            X *o = &dst[(size_t)t * stride + d];
            px_st(o, accumulate ? px_ld(*o) + v : v);
        }
    }
    __syncwarp();
}

/* ---------------------------------------------------------------- forward */

/* How far a row's maximum may grow past the one its exponentials are
 * taken against before the output is rescaled: exp(s - m) stays below
 * e^8 ~ 3000 (no overflow in FP32 sums, bf16 keeps its 8 bits), and a
 * row's maximum rarely jumps that far after its first tile, so the output
 * mostly stays in registers. The result is the same softmax: lse and the
 * normalization use the maximum the sums were taken against. */
#define FA_RESCALE_MARGIN 8.0f

template <int D>
__host__ __device__ constexpr size_t fwd_smem_bytes() {
    return 3 * FA_TILE * D * sizeof(bf16) + FA_TILE * FA_TILE * (sizeof(bf16) + sizeof(float)) +
           FA_TILE * D * sizeof(float) + 3 * FA_TILE * sizeof(float);
}

/* grid (query tiles, B*NH), FA_THREADS threads, fwd_smem_bytes<D>().
 * A warp's 16 output rows stay in accumulator fragments (registers) across
 * the key tiles; they go through shared memory only to be rescaled (a
 * row's maximum grew past FA_RESCALE_MARGIN) and at the end. */
template <int D, typename X>
__global__ void __launch_bounds__(FA_THREADS)
    flash_fwd_kernel(X *out, float *lse, const X *qkv, int T, int C, int NH, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap(); /* never launched: flash_attention_supported() says no below sm_80 */
#else
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *Ks = Qs + FA_TILE * D, *Vs = Ks + FA_TILE * D, *Ps = Vs + FA_TILE * D;
    float *Ss = (float *)(Ps + FA_TILE * FA_TILE), *Os = Ss + FA_TILE * FA_TILE;
    float *row_m = Os + FA_TILE * D, *row_l = row_m + FA_TILE, *row_c = row_l + FA_TILE;

    int qt = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh - b * NH;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r0 = 16 * warp;
    int q0 = qt * FA_TILE;
    size_t s3 = 3 * (size_t)C;
    const X *base = qkv + (size_t)b * T * s3 + (size_t)h * D;

    load_tile<D>(Qs, base, s3, q0, T);
    if (threadIdx.x < FA_TILE) row_m[threadIdx.x] = -INFINITY, row_l[threadIdx.x] = 0.0f;
    acc_t o[D / 16]; /* the warp's 16 output rows, unnormalized */
#pragma unroll
    for (int j = 0; j < D / 16; j++) wmma::fill_fragment(o[j], 0.0f);

    /* Lanes 2i and 2i+1 share row r0+i: half the keys each, then combined. */
    int r = r0 + (lane >> 1), half = lane & 1, q = q0 + r;
    for (int kt = 0; kt <= qt; kt++) {
        int k0 = kt * FA_TILE;
        __syncthreads(); /* the previous tile's K and V are no longer read */
        load_tile<D>(Ks, base + C, s3, k0, T);
        load_tile<D>(Vs, base + 2 * (size_t)C, s3, k0, T);
        __syncthreads();

        rows_times_tile_t<D>(Ss + r0 * FA_TILE, Qs + r0 * D, Ks);
        __syncwarp();

        /* Each lane starts its 32 columns at its own offset: the 32 lanes then
         * touch 32 different banks at once (same columns would be one). */
        float *srow = Ss + r * FA_TILE;
        float mx = -INFINITY;
        for (int j = 0; j < 32; j++) {
            int c = 32 * half + ((j + lane) & 31), k = k0 + c;
            float s = k <= q && k < T ? srow[c] * scale : -INFINITY;
            srow[c] = s;
            mx = fmaxf(mx, s);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        /* the maximum the exponentials are taken against moves only when
         * the row's grows past it by the margin (or is not yet set) */
        float m_old = row_m[r];
        int move = mx > -INFINITY && (m_old == -INFINITY || mx > m_old + FA_RESCALE_MARGIN);
        float m_new = move ? mx : m_old;
        float sum = 0.0f;
        bf16 *prow = Ps + r * FA_TILE;
        for (int j = 0; j < 32; j++) {
            int c = 32 * half + ((j + lane) & 31);
            float p = srow[c] == -INFINITY ? 0.0f : __expf(srow[c] - m_new);
            prow[c] = __float2bfloat16(p);
            sum += p;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        float corr = !move ? 1.0f : m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);
        __syncwarp(); /* both lanes of a row have read row_m */
        if (!half) row_m[r] = m_new, row_l[r] = row_l[r] * corr + sum, row_c[r] = corr;
        __syncwarp();

        /* Rescale the output rows whose maximum moved, through shared memory
         * (the first tile's output is all zeros: nothing to rescale). */
        int any = 0;
        for (int i = 0; i < 16; i++) any |= row_c[r0 + i] != 1.0f;
        if (any && kt > 0) {
#pragma unroll
            for (int j = 0; j < D / 16; j++)
                wmma::store_matrix_sync(Os + r0 * D + 16 * j, o[j], D, wmma::mem_row_major);
            __syncwarp();
            for (int i = lane; i < 16 * D; i += 32) Os[r0 * D + i] *= row_c[r0 + i / D];
            __syncwarp();
#pragma unroll
            for (int j = 0; j < D / 16; j++)
                wmma::load_matrix_sync(o[j], Os + r0 * D + 16 * j, D, wmma::mem_row_major);
        }

        /* O rows += P rows V */
#pragma unroll
        for (int j = 0; j < D / 16; j++) {
#pragma unroll
            for (int kk = 0; kk < FA_TILE; kk += 16) {
                a_row_t fa;
                b_row_t fb;
                wmma::load_matrix_sync(fa, Ps + r0 * FA_TILE + kk, FA_TILE);
                wmma::load_matrix_sync(fb, Vs + (size_t)kk * D + 16 * j, D);
                wmma::mma_sync(o[j], fa, fb, o[j]);
            }
        }
        __syncwarp();
    }

#pragma unroll
    for (int j = 0; j < D / 16; j++) wmma::store_matrix_sync(Os + r0 * D + 16 * j, o[j], D, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 16 * D; i += 32) {
        int rr = r0 + i / D, d = i % D, t = q0 + rr;
        if (t < T) px_st(&out[((size_t)b * T + t) * C + (size_t)h * D + d], Os[rr * D + d] / row_l[rr]);
    }
    if (lane < 16 && q0 + r0 + lane < T) {
        int rr = r0 + lane;
        lse[(size_t)bh * T + q0 + rr] = row_m[rr] + logf(row_l[rr]);
    }
#endif
}

/* --------------------------------------------------------------- backward */

/* Dv (B*NH*T) = rowsum(dout * out) per head, one warp per row. */
template <typename X>
__global__ void flash_bwd_dot_kernel(float *Dv, const X *dout, const X *out, int rows, int T, int C, int NH, int hs) {
    int row = blockIdx.x * (PX_THREADS / 32) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    int t = row % T, bh = row / T, b = bh / NH, h = bh - b * NH;
    size_t off = ((size_t)b * T + t) * C + (size_t)h * hs;
    float s = 0.0f;
    for (int d = lane; d < hs; d += 32) s += px_ld(dout[off + d]) * px_ld(out[off + d]);
    s = px_warp_sum(s);
    if (lane == 0) Dv[row] = s;
}

/* The two backward kernels share one layout: the block's own tile pair
 * (K and V for dK/dV; Q and dO for dQ) and the partner pair streamed past
 * it, the FP32 scores and dP tiles, the bf16 P and dS tiles, and each query
 * row's lse and D. */
template <int D>
__host__ __device__ constexpr size_t bwd_smem_bytes() {
    return 4 * FA_TILE * D * sizeof(bf16) + FA_TILE * FA_TILE * (2 * sizeof(float) + 2 * sizeof(bf16)) +
           2 * FA_TILE * sizeof(float);
}

typedef struct {
    bf16 *own1, *own2, *other1, *other2, *p, *ds;
    float *s, *dp, *lse, *dv;
} bwd_smem_t;

template <int D>
__device__ bwd_smem_t bwd_carve(unsigned char *smem) {
    bwd_smem_t m;
    m.own1 = (bf16 *)smem;
    m.own2 = m.own1 + FA_TILE * D;
    m.other1 = m.own2 + FA_TILE * D;
    m.other2 = m.other1 + FA_TILE * D;
    m.s = (float *)(m.other2 + FA_TILE * D);
    m.dp = m.s + FA_TILE * FA_TILE;
    m.p = (bf16 *)(m.dp + FA_TILE * FA_TILE);
    m.ds = m.p + FA_TILE * FA_TILE;
    m.lse = (float *)(m.ds + FA_TILE * FA_TILE);
    m.dv = m.lse + FA_TILE;
    return m;
}

/* The lse and D of the query rows t0.. of head row bh (0 past T). */
__device__ void load_row_stats(bwd_smem_t m, const float *lse, const float *Dv, int bh, int t0, int T) {
    if (threadIdx.x < FA_TILE) {
        int t = t0 + threadIdx.x;
        m.lse[threadIdx.x] = t < T ? lse[(size_t)bh * T + t] : 0.0f;
        m.dv[threadIdx.x] = t < T ? Dv[(size_t)bh * T + t] : 0.0f;
    }
}

/* grid (key tiles, B*NH): dK and dV of one key tile. */
template <int D, typename X>
__global__ void __launch_bounds__(FA_THREADS)
    flash_bwd_kv_kernel(X *dqkv, const X *dout, const X *qkv, const float *lse, const float *Dv, int T, int C, int NH,
                        float scale, int accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();
#else
    extern __shared__ __align__(128) unsigned char smem[];
    bwd_smem_t m = bwd_carve<D>(smem);
    bf16 *Ks = m.own1, *Vs = m.own2, *Qs = m.other1, *dOs = m.other2, *Pt = m.p, *dSt = m.ds;
    float *St = m.s, *dPt = m.dp, *lse_s = m.lse, *D_s = m.dv;

    int kt = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh - b * NH;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r0 = 16 * warp;
    int k0 = kt * FA_TILE, ntiles = (T + FA_TILE - 1) / FA_TILE;
    size_t s3 = 3 * (size_t)C;
    const X *base = qkv + (size_t)b * T * s3 + (size_t)h * D;
    const X *dobase = dout + (size_t)b * T * C + (size_t)h * D;

    load_tile<D>(Ks, base + C, s3, k0, T);
    load_tile<D>(Vs, base + 2 * (size_t)C, s3, k0, T);
    acc_t dk[D / 16], dv[D / 16];
#pragma unroll
    for (int j = 0; j < D / 16; j++) wmma::fill_fragment(dk[j], 0.0f), wmma::fill_fragment(dv[j], 0.0f);

    for (int qt = kt; qt < ntiles; qt++) {
        int q0 = qt * FA_TILE;
        __syncthreads(); /* the previous query tile is no longer read */
        load_tile<D>(Qs, base, s3, q0, T);
        load_tile<D>(dOs, dobase, C, q0, T);
        load_row_stats(m, lse, Dv, bh, q0, T);
        __syncthreads();

        /* S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys */
        rows_times_tile_t<D>(St + r0 * FA_TILE, Ks + r0 * D, Qs);
        rows_times_tile_t<D>(dPt + r0 * FA_TILE, Vs + r0 * D, dOs);
        __syncwarp();
        for (int i = lane; i < 16 * FA_TILE; i += 32) {
            int rr = r0 + i / FA_TILE, c = i % FA_TILE, k = k0 + rr, q = q0 + c, at = rr * FA_TILE + c;
            float p = k <= q && q < T ? __expf(St[at] * scale - lse_s[c]) : 0.0f;
            Pt[at] = __float2bfloat16(p);
            dSt[at] = __float2bfloat16(p * (dPt[at] - D_s[c]));
        }
        __syncwarp();
        rows_times_tile_acc<D>(dv, Pt + r0 * FA_TILE, dOs);  /* dV += P^T dO */
        rows_times_tile_acc<D>(dk, dSt + r0 * FA_TILE, Qs);  /* dK += dS^T Q */
    }

    __syncthreads(); /* St and dPt become every warp's staging area */
    float *stage = St + (size_t)warp * 16 * D; /* 4 x 16 x 128 floats fit St and dPt */
    X *dst = dqkv + (size_t)b * T * s3 + (size_t)h * D;
    add_rows<D>(dst + C, s3, k0 + r0, T, dk, stage, scale, accumulate);
    add_rows<D>(dst + 2 * (size_t)C, s3, k0 + r0, T, dv, stage, 1.0f, accumulate);
#endif
}

/* grid (query tiles, B*NH): dQ of one query tile. */
template <int D, typename X>
__global__ void __launch_bounds__(FA_THREADS)
    flash_bwd_q_kernel(X *dqkv, const X *dout, const X *qkv, const float *lse, const float *Dv, int T, int C, int NH,
                       float scale, int accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();
#else
    extern __shared__ __align__(128) unsigned char smem[];
    bwd_smem_t m = bwd_carve<D>(smem); /* its P tile is unused here */
    bf16 *Qs = m.own1, *dOs = m.own2, *Ks = m.other1, *Vs = m.other2, *dS = m.ds;
    float *S = m.s, *dP = m.dp, *lse_s = m.lse, *D_s = m.dv;

    int qt = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh - b * NH;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r0 = 16 * warp;
    int q0 = qt * FA_TILE;
    size_t s3 = 3 * (size_t)C;
    const X *base = qkv + (size_t)b * T * s3 + (size_t)h * D;

    load_tile<D>(Qs, base, s3, q0, T);
    load_tile<D>(dOs, dout + (size_t)b * T * C + (size_t)h * D, C, q0, T);
    load_row_stats(m, lse, Dv, bh, q0, T);
    acc_t dq[D / 16];
#pragma unroll
    for (int j = 0; j < D / 16; j++) wmma::fill_fragment(dq[j], 0.0f);

    for (int kt = 0; kt <= qt; kt++) {
        int k0 = kt * FA_TILE;
        __syncthreads();
        load_tile<D>(Ks, base + C, s3, k0, T);
        load_tile<D>(Vs, base + 2 * (size_t)C, s3, k0, T);
        __syncthreads();

        rows_times_tile_t<D>(S + r0 * FA_TILE, Qs + r0 * D, Ks);   /* S = Q K^T */
        rows_times_tile_t<D>(dP + r0 * FA_TILE, dOs + r0 * D, Vs); /* dP = dO V^T */
        __syncwarp();
        for (int i = lane; i < 16 * FA_TILE; i += 32) {
            int rr = r0 + i / FA_TILE, c = i % FA_TILE, q = q0 + rr, k = k0 + c, at = rr * FA_TILE + c;
            float p = k <= q && q < T ? __expf(S[at] * scale - lse_s[rr]) : 0.0f;
            dS[at] = __float2bfloat16(p * (dP[at] - D_s[rr]));
        }
        __syncwarp();
        rows_times_tile_acc<D>(dq, dS + r0 * FA_TILE, Ks); /* dQ += dS K */
    }

    __syncthreads();
    float *stage = S + (size_t)warp * 16 * D;
    add_rows<D>(dqkv + (size_t)b * T * s3 + (size_t)h * D, s3, q0 + r0, T, dq, stage, scale, accumulate);
#endif
}

/* ---------------------------------------------------------------- launch */

/* The head sizes the kernels are instantiated for. */
static int head_size_ok(int hs) { return hs == 16 || hs == 32 || hs == 64 || hs == 128; }

extern "C" int flash_attention_supported(int hs) {
    if (!head_size_ok(hs)) return 0;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return major >= 8;
}

/* Dynamic shared memory above 48 KiB needs the kernel's consent, once. */
template <typename K>
static void allow_smem(K kernel, size_t bytes, int *done) {
    if (*done) return;
    PX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = 1;
}

template <int D, typename X>
static void forward(X *out, float *lse, const X *qkv, int B, int T, int C, int NH, cudaStream_t stream) {
    static int ready;
    size_t bytes = fwd_smem_bytes<D>();
    allow_smem(flash_fwd_kernel<D, X>, bytes, &ready);
    dim3 grid((unsigned)((T + FA_TILE - 1) / FA_TILE), (unsigned)(B * NH));
    flash_fwd_kernel<D, X><<<grid, FA_THREADS, bytes, stream>>>(out, lse, qkv, T, C, NH, 1.0f / sqrtf((float)D));
    PX_CUDA_LAUNCH_CHECK();
}

template <int D, typename X>
static void backward(X *dqkv, const X *dout, const X *qkv, const float *lse, const float *Dv, int B, int T, int C,
                     int NH, int accumulate, cudaStream_t stream) {
    static int ready_kv, ready_q;
    size_t bytes = bwd_smem_bytes<D>();
    allow_smem(flash_bwd_kv_kernel<D, X>, bytes, &ready_kv);
    allow_smem(flash_bwd_q_kernel<D, X>, bytes, &ready_q);
    dim3 grid((unsigned)((T + FA_TILE - 1) / FA_TILE), (unsigned)(B * NH));
    float scale = 1.0f / sqrtf((float)D);
    flash_bwd_kv_kernel<D, X><<<grid, FA_THREADS, bytes, stream>>>(dqkv, dout, qkv, lse, Dv, T, C, NH, scale,
                                                                    accumulate);
    PX_CUDA_LAUNCH_CHECK();
    flash_bwd_q_kernel<D, X><<<grid, FA_THREADS, bytes, stream>>>(dqkv, dout, qkv, lse, Dv, T, C, NH, scale,
                                                                   accumulate);
    PX_CUDA_LAUNCH_CHECK();
}

/* Only the head size is checked per call (the device's compute capability,
 * asked once by the caller through flash_attention_supported, is not asked
 * again on every layer: on a GPU below sm_80 the launch fails with "no
 * kernel image", which PX_CUDA_LAUNCH_CHECK reports). */
static void check_head_size(int hs) {
    if (!head_size_ok(hs))
        px_cuda_fail(__FILE__, __LINE__, "flash attention", "cuda", 0,
                     "head size not 16, 32, 64 or 128 (ask flash_attention_supported first)");
}

template <typename X>
static void flash_forward(X *out, float *lse, const X *qkv, int B, int T, int C, int NH, cudaStream_t stream) {
    int hs = C / NH;
    check_head_size(hs);
    switch (hs) {
    case 16: forward<16>(out, lse, qkv, B, T, C, NH, stream); break;
    case 32: forward<32>(out, lse, qkv, B, T, C, NH, stream); break;
    case 64: forward<64>(out, lse, qkv, B, T, C, NH, stream); break;
    default: forward<128>(out, lse, qkv, B, T, C, NH, stream); break;
    }
}

extern "C" void flash_attention_forward_cuda(float *out, float *lse, const float *qkv, int B, int T, int C, int NH,
                                             cudaStream_t stream) {
    flash_forward(out, lse, qkv, B, T, C, NH, stream);
}
void flash_attention_forward_cuda(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int C, int NH,
                                  cudaStream_t stream) {
    flash_forward(out, lse, qkv, B, T, C, NH, stream);
}

/* Every element of dqkv's rows below T, in this call's heads, is written
 * exactly once (dK and dV by the key-tile kernel, dQ by the query-tile one),
 * so it can be overwritten as well as accumulated. */
template <typename X>
static void flash_backward(X *dqkv, const X *dout, const X *qkv, const X *out, const float *lse, int B, int T, int C,
                           int NH, int accumulate, cudaStream_t stream) {
    int hs = C / NH, rows = B * NH * T;
    check_head_size(hs);
    float *Dv = (float *)px_cuda_scratch((size_t)rows * sizeof(float));
    flash_bwd_dot_kernel<X><<<(unsigned)((rows + PX_THREADS / 32 - 1) / (PX_THREADS / 32)), PX_THREADS, 0, stream>>>(
        Dv, dout, out, rows, T, C, NH, hs);
    PX_CUDA_LAUNCH_CHECK();
    switch (hs) {
    case 16: backward<16>(dqkv, dout, qkv, lse, Dv, B, T, C, NH, accumulate, stream); break;
    case 32: backward<32>(dqkv, dout, qkv, lse, Dv, B, T, C, NH, accumulate, stream); break;
    case 64: backward<64>(dqkv, dout, qkv, lse, Dv, B, T, C, NH, accumulate, stream); break;
    default: backward<128>(dqkv, dout, qkv, lse, Dv, B, T, C, NH, accumulate, stream); break;
    }
}

extern "C" void flash_attention_backward_cuda(float *dqkv, const float *dout, const float *qkv, const float *out,
                                              const float *lse, int B, int T, int C, int NH,
                                              cudaStream_t stream) {
    flash_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, 1, stream);
}

extern "C" void flash_attention_backward_set_cuda(float *dqkv, const float *dout, const float *qkv, const float *out,
                                                  const float *lse, int B, int T, int C, int NH,
                                                  cudaStream_t stream) {
    flash_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, 0, stream);
}
void flash_attention_backward_set_cuda(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const bf16 *out,
                                       const float *lse, int B, int T, int C, int NH, cudaStream_t stream) {
    flash_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, 0, stream);
}
