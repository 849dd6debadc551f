/* The kernel emulator's runtime (include/cuda_emu_device.h says what it
 * models): the fiber scheduler behind launches and barriers, and the CUDA
 * host API of include/cuda_runtime_api.h over host memory, events on the
 * host's clock. cuBLAS is cublas.cpp's; the ops' own context
 * (kernels/cuda_context.cu) runs as it is.
 *
 * Scheduling: the fibers of a block are ranked by a permutation drawn
 * afresh for every launch (xorshift, seeded by PX_EMU_SEED or 1); the first
 * runnable fiber in that rank runs until it blocks on a barrier or returns,
 * so the leading warps run as far ahead as the barriers let them (a missing
 * __syncthreads shows as a read of data not yet written). When no fiber can
 * move while some still wait, that is a deadlock: reported with the barrier
 * and the counts, and the process aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>

#include <vector>

#include "cuda_runtime.h"

/* ---- contexts: the x86-64 switch of switch_x86_64.S, else ucontext ---- */
#if defined(__x86_64__)
extern "C" void px_emu_switch(void **save_sp, void *load_sp);
namespace {
struct ctx_t {
    void *sp;
};
void ctx_make(ctx_t *c, char *stack, size_t size, void (*entry)()) {
    uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = NULL;            /* entry's return address: it never returns */
    *--sp = (void *)entry;   /* where the first switch's ret lands */
    for (int i = 0; i < 6; i++) *--sp = NULL; /* rbp rbx r12-r15 */
    const uint32_t ctrl[2] = {0x1F80u, 0x037Fu}; /* MXCSR and x87 control word defaults */
    --sp;
    memcpy(sp, ctrl, sizeof ctrl);
    c->sp = sp;
}
void ctx_switch(ctx_t *from, ctx_t *to) { px_emu_switch(&from->sp, to->sp); }
} // namespace
#else
namespace {
struct ctx_t {
    ucontext_t uc;
};
void ctx_make(ctx_t *c, char *stack, size_t size, void (*entry)()) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = NULL;
    makecontext(&c->uc, entry, 0);
}
void ctx_switch(ctx_t *from, ctx_t *to) { swapcontext(&from->uc, &to->uc); }
} // namespace
#endif

namespace emu {
dim3 block_idx, block_dim, grid_dim;

namespace {
enum state_t { RUNNABLE, AT_BLOCK, AT_WARP, DONE };

struct fiber_t {
    ctx_t ctx;
    dim3 tid;
    int warp;
    int rank; /* its place in the launch's order */
    state_t state;
};

struct barrier_t {
    int arrived;
    int live;
};

const size_t STACK_BYTES = 512 * 1024;
const int MAX_THREADS = 1024;

ctx_t sched_ctx;
std::vector<fiber_t> fibers;
std::vector<int> by_rank;      /* rank -> fiber */
std::vector<uint64_t> ready;   /* bit per rank: may run now */
std::vector<barrier_t> warps;  /* per warp: its barrier and live lanes */
std::vector<uint64_t> slots;   /* per thread: the value it offers a shuffle */
std::vector<float> scratch;    /* per warp: 256 floats (warp_scratch) */
barrier_t block_bar;
fiber_t *cur;
const std::function<void()> *body;
char *stacks;
std::vector<unsigned char> dyn;
uint64_t rng_state;
int in_kernel;

uint64_t next_random() {
    if (!rng_state) {
        const char *s = getenv("PX_EMU_SEED");
        rng_state = s && *s ? strtoull(s, NULL, 10) : 1;
        if (!rng_state) rng_state = 1;
    }
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

void set_ready(const fiber_t &f, int on) {
    uint64_t bit = 1ull << (f.rank & 63);
    if (on) ready[(size_t)f.rank >> 6] |= bit;
    else ready[(size_t)f.rank >> 6] &= ~bit;
}

/* Frees the barrier's waiters once every live thread it spans has arrived. */
void release_if_full(barrier_t *b, state_t st, int first, int count) {
    if (b->arrived == 0 || b->arrived < b->live) return;
    b->arrived = 0;
    for (int i = first; i < first + count; i++) {
        fiber_t &f = fibers[(size_t)i];
        if (f.state == st) {
            f.state = RUNNABLE;
            set_ready(f, 1);
        }
    }
}

void release_warp(int w) {
    int first = 32 * w, count = (int)fibers.size() - first < 32 ? (int)fibers.size() - first : 32;
    release_if_full(&warps[(size_t)w], AT_WARP, first, count);
}

void release_block() { release_if_full(&block_bar, AT_BLOCK, 0, (int)fibers.size()); }

void trampoline() {
    (*body)();
    cur->state = DONE;
    set_ready(*cur, 0);
    block_bar.live--;
    warps[(size_t)cur->warp].live--;
    release_block();
    release_warp(cur->warp);
    ctx_switch(&cur->ctx, &sched_ctx);
    abort(); /* a finished fiber is never resumed */
}

void wait_at(barrier_t *b, state_t st) {
    if (!in_kernel) trap("a barrier outside a kernel");
    cur->state = st;
    set_ready(*cur, 0);
    b->arrived++;
    if (st == AT_BLOCK) release_block();
    else release_warp(cur->warp);
    ctx_switch(&cur->ctx, &sched_ctx);
}

void run_block(int nthreads, const std::vector<int> &order) {
    int nwarps = (nthreads + 31) / 32;
    fibers.assign((size_t)nthreads, fiber_t());
    by_rank.assign((size_t)nthreads, 0);
    ready.assign(((size_t)nthreads + 63) / 64, 0);
    warps.assign((size_t)nwarps, barrier_t{0, 0});
    slots.assign((size_t)nthreads, 0);
    scratch.assign((size_t)nwarps * 256, 0.0f);
    block_bar = barrier_t{0, nthreads};
    for (int i = 0; i < nthreads; i++) {
        fiber_t &f = fibers[(size_t)i];
        int x = i % (int)block_dim.x, y = (i / (int)block_dim.x) % (int)block_dim.y;
        int z = i / ((int)block_dim.x * (int)block_dim.y);
        f.tid = dim3((unsigned)x, (unsigned)y, (unsigned)z);
        f.warp = i / 32;
        f.rank = order[(size_t)i];
        f.state = RUNNABLE;
        by_rank[(size_t)f.rank] = i;
        set_ready(f, 1);
        warps[(size_t)f.warp].live++;
        ctx_make(&f.ctx, stacks + (size_t)i * STACK_BYTES, STACK_BYTES, trampoline);
    }
    /* Greedy: always the runnable fiber of the lowest rank, so the leading
     * warps run as far ahead of the others as the barriers allow. */
    for (;;) {
        int rank = -1;
        for (size_t w = 0; w < ready.size() && rank < 0; w++)
            if (ready[w]) rank = (int)(w * 64) + __builtin_ctzll(ready[w]);
        if (rank < 0) {
            int at_block = 0, at_warp = 0;
            for (const fiber_t &f : fibers) at_block += f.state == AT_BLOCK, at_warp += f.state == AT_WARP;
            if (at_block + at_warp == 0) return; /* every thread returned */
            fprintf(stderr,
                    "emu: deadlock in block (%u,%u,%u): %d thread(s) wait at __syncthreads (%d live), %d at a "
                    "warp barrier (__syncwarp, a shuffle or wmma)\n",
                    block_idx.x, block_idx.y, block_idx.z, at_block, block_bar.live, at_warp);
            abort();
        }
        cur = &fibers[(size_t)by_rank[(size_t)rank]];
        ctx_switch(&sched_ctx, &cur->ctx);
    }
}
} // namespace

const dim3 &thread_idx() {
    if (!in_kernel) trap("threadIdx outside a kernel");
    return cur->tid;
}

void sync_block() { wait_at(&block_bar, AT_BLOCK); }
void sync_warp() { wait_at(&warps[(size_t)cur->warp], AT_WARP); }

uint64_t exchange(uint64_t v, int src_lane) {
    size_t me = (size_t)(cur - fibers.data()), base = (size_t)cur->warp * 32;
    slots[me] = v;
    sync_warp();
    size_t src = base + (size_t)src_lane;
    uint64_t out = src < slots.size() ? slots[src] : 0;
    sync_warp(); /* every lane has read before a slot is offered again */
    return out;
}

void *dyn_smem() { return dyn.data(); }
float *warp_scratch() { return scratch.data() + (size_t)cur->warp * 256; }

void trap(const char *why) {
    fprintf(stderr, "emu: %s\n", why);
    abort();
}

void run(dim3 grid, dim3 block, size_t smem, const std::function<void()> &fn) {
    size_t nthreads = (size_t)block.x * block.y * block.z;
    if (nthreads == 0 || nthreads > (size_t)MAX_THREADS || grid.x == 0 || grid.y == 0 || grid.z == 0) {
        fprintf(stderr, "emu: bad launch: grid (%u,%u,%u) block (%u,%u,%u)\n", grid.x, grid.y, grid.z, block.x,
                block.y, block.z);
        abort();
    }
    if (!stacks) {
        void *p = mmap(NULL, STACK_BYTES * MAX_THREADS, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) trap("cannot map the fiber stacks");
        stacks = (char *)p;
    }
    std::vector<int> order(nthreads);
    for (size_t i = 0; i < nthreads; i++) order[i] = (int)i;
    for (size_t i = nthreads; i > 1; i--) { /* Fisher-Yates: thread i's rank, anew per launch */
        size_t j = (size_t)(next_random() % i);
        int t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    grid_dim = grid;
    block_dim = block;
    body = &fn;
    in_kernel = 1;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                block_idx = dim3(x, y, z);
                dyn.assign(smem, 0xFF); /* NaN floats: a read before any write shows */
                run_block((int)nthreads, order);
            }
    in_kernel = 0;
}
} // namespace emu

/* ------------------------------------------------------- the host API */

extern "C" {
const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaSuccess ? "no error" : e == cudaErrorMemoryAllocation ? "out of memory" : "invalid argument";
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *dev) {
    *dev = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int dev) {
    if (dev != 0) return cudaErrorInvalidValue;
    *value = attr == cudaDevAttrComputeCapabilityMajor ? 9 : 0;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    (void)kind;
    if (bytes) memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    (void)s;
    return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void *p, int value, size_t bytes) {
    memset(p, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s) {
    (void)s;
    return cudaMemset(p, value, bytes);
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    (void)s;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    (void)flags;
    *s = NULL;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    (void)s;
    return cudaSuccess;
}
/* Every call returns with its work done, so an event is the time it was recorded. */
struct px_emu_event {
    double ms; /* CLOCK_MONOTONIC; < 0 until recorded */
};
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = (cudaEvent_t)malloc(sizeof **e);
    if (!*e) return cudaErrorMemoryAllocation;
    (*e)->ms = -1.0;
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    free(e);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    (void)s;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e->ms < 0 ? cudaErrorInvalidValue : cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (start->ms < 0 || end->ms < 0) return cudaErrorInvalidValue;
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int dev) {
    if (dev != 0) return cudaErrorInvalidValue;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "phalanx kernel emulator (the CPU)");
    prop->major = 9;
    prop->totalGlobalMem = (size_t)16 << 30;
    return cudaSuccess;
}
}
