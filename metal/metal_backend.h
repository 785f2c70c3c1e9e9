/* metal_backend.h - what the Metal backend offers beyond the backend vtable
 * (md_metal_backend_ops() is declared in backend/backend_impl.h). Plain C;
 * defined by metal_backend.m on macOS and by metal_stub.c elsewhere. */
#ifndef MD_METAL_BACKEND_H
#define MD_METAL_BACKEND_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds spent compiling the embedded MSL source and creating the pipeline
 * states when `dev` was opened (0 for other backends or the stub). */
double md_metal_compile_seconds(const md_device *dev);

/* PyTorch's default PYTORCH_MPS_HIGH_WATERMARK_RATIO: without
 * --memory-fraction / MPSDIAG_HIGH_WATERMARK_RATIO, Metal allocations are
 * capped at this multiple of recommendedMaxWorkingSetSize. */
#define MD_METAL_DEFAULT_WATERMARK 1.7

#ifdef __cplusplus
}
#endif
#endif
