/* The CUDA runtime as the kernel emulator provides it: the host API
 * (cuda_runtime_api.h) and, for C++, the device side (cuda_emu_device.h). */
#ifndef PX_EMU_CUDA_RUNTIME_H
#define PX_EMU_CUDA_RUNTIME_H
#include "cuda_runtime_api.h"
#ifdef __cplusplus
#include "cuda_emu_device.h"
#endif
#endif
