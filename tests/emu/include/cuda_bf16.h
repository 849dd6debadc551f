/* bfloat16 as the kernel emulator provides it: the upper half of a float,
 * rounded to nearest even (NaN stays NaN), as cuda_bf16.h does. */
#ifndef PX_EMU_CUDA_BF16_H
#define PX_EMU_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    uint16_t bits;
    __nv_bfloat16() = default;
    operator float() const {
        uint32_t u = (uint32_t)bits << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
};

inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    __nv_bfloat16 h;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) h.bits = (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    else h.bits = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    return h;
}

inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }

#endif
