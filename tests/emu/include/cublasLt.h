/* See cublas_v2.h here: names only. */
#ifndef PX_EMU_CUBLASLT_H
#define PX_EMU_CUBLASLT_H
#include "cublas_v2.h"
typedef struct px_emu_cublaslt *cublasLtHandle_t;
#endif
