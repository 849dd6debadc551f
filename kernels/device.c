/* Device selection (device.h). Kept apart from the ops so that a CPU-only
 * build answers `--device cuda` with a clear reason instead of a link error. */
#include "device.h"

#include <stdio.h>
#include <string.h>

int px_device_parse(const char *name, px_device_t *out) {
    if (strcmp(name, "cpu") == 0) {
        *out = PX_DEVICE_CPU;
        return 0;
    }
    if (strcmp(name, "cuda") == 0) {
        *out = PX_DEVICE_CUDA;
        return 0;
    }
    return -1;
}

int px_cuda_available(char *why, size_t whylen) {
#ifdef PX_HAVE_CUDA_OPS
    return px_cuda_device_count(why, whylen) > 0;
#else
    snprintf(why, whylen,
             "this binary was built without the CUDA kernels (they need nvcc at configure "
             "time, PHALANX_CUDA=AUTO or ON, and the kernels' .cu sources)");
    return 0;
#endif
}
