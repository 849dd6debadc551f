/* nvcuda::wmma as the kernel emulator runs it: a fragment holds its whole
 * tile in every thread of the warp (the hardware spreads it over the lanes,
 * which code that only loads, multiplies and stores fragments cannot see),
 * and each call is warp-collective: the warp meets after it, so no lane
 * starts the next call before every lane has finished this one. Lane 0
 * alone stores a tile and computes a product (every lane holds the same
 * operands), which the others then copy. Products of bf16 (or half) inputs
 * are exact in float; sums run in k order. */
#ifndef PX_EMU_MMA_H
#define PX_EMU_MMA_H

#include "cuda_bf16.h"
#include "cuda_emu_device.h"

namespace nvcuda {
namespace wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K> struct shape_of;
template <int M, int N, int K> struct shape_of<matrix_a, M, N, K> { enum { rows = M, cols = K }; };
template <int M, int N, int K> struct shape_of<matrix_b, M, N, K> { enum { rows = K, cols = N }; };
template <int M, int N, int K> struct shape_of<accumulator, M, N, K> { enum { rows = M, cols = N }; };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    enum { rows = shape_of<Use, M, N, K>::rows, cols = shape_of<Use, M, N, K>::cols, num_elements = rows * cols };
    T x[rows * cols]; /* (r, c) at x[r * cols + c] */
};

template <class Use, int M, int N, int K, class T, class L>
void fill_fragment(fragment<Use, M, N, K, T, L> &f, T v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
    emu::sync_warp();
}

template <class Use, int M, int N, int K, class T>
void load_matrix_sync(fragment<Use, M, N, K, T, row_major> &f, const T *p, unsigned ldm) {
    for (int r = 0; r < f.rows; r++)
        for (int c = 0; c < f.cols; c++) f.x[r * f.cols + c] = p[(size_t)r * ldm + c];
    emu::sync_warp();
}

template <class Use, int M, int N, int K, class T>
void load_matrix_sync(fragment<Use, M, N, K, T, col_major> &f, const T *p, unsigned ldm) {
    for (int r = 0; r < f.rows; r++)
        for (int c = 0; c < f.cols; c++) f.x[r * f.cols + c] = p[(size_t)c * ldm + r];
    emu::sync_warp();
}

template <int M, int N, int K, class T>
void load_matrix_sync(fragment<accumulator, M, N, K, T, void> &f, const T *p, unsigned ldm, layout_t l) {
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            f.x[r * N + c] = l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    emu::sync_warp();
}

template <int M, int N, int K, class T>
void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T, void> &f, unsigned ldm, layout_t l) {
    if ((threadIdx.x & 31) == 0) /* every lane holds the same tile */
        for (int r = 0; r < M; r++)
            for (int c = 0; c < N; c++)
                (l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.x[r * N + c];
    emu::sync_warp();
}

template <int M, int N, int K, class Tab, class La, class Lb, class Tc>
void mma_sync(fragment<accumulator, M, N, K, Tc, void> &d, const fragment<matrix_a, M, N, K, Tab, La> &a,
              const fragment<matrix_b, M, N, K, Tab, Lb> &b, const fragment<accumulator, M, N, K, Tc, void> &c) {
    static_assert(sizeof(Tc) * M * N <= sizeof(float) * 256, "a product tile over the warp's scratch");
    Tc *out = (Tc *)emu::warp_scratch();
    if ((threadIdx.x & 31) == 0)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                Tc s = c.x[i * N + j];
                for (int k = 0; k < K; k++) s += (float)a.x[i * K + k] * (float)b.x[k * N + j];
                out[i * N + j] = s;
            }
    emu::sync_warp();
    memcpy(d.x, out, sizeof d.x);
    emu::sync_warp(); /* every lane has its copy before lane 0 writes the next product */
}
} // namespace wmma
} // namespace nvcuda

#endif
