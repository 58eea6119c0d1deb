/* The DLPack ABI (https://dmlc.github.io/dlpack/latest/c_api.html), the
 * subset a CPU and CUDA exporter needs, as of DLPack 0.6-0.8 (unversioned
 * DLManagedTensor in a "dltensor" capsule). Spelled out here so the build
 * needs no dlpack header; the layout is fixed by that ABI. */
#ifndef CHIMEPY_DLPACK_H
#define CHIMEPY_DLPACK_H

#include <stdint.h>

enum { CHIMEPY_DL_CPU = 1, CHIMEPY_DL_CUDA = 2 };
enum {
  CHIMEPY_DL_INT = 0,
  CHIMEPY_DL_UINT = 1,
  CHIMEPY_DL_FLOAT = 2,
  CHIMEPY_DL_BFLOAT = 4,
  CHIMEPY_DL_COMPLEX = 5,
  CHIMEPY_DL_BOOL = 6,
};

typedef struct {
  int32_t device_type;
  int32_t device_id;
} chimepy_dl_device_t;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} chimepy_dl_dtype_t;

typedef struct {
  void *data;
  chimepy_dl_device_t device;
  int32_t ndim;
  chimepy_dl_dtype_t dtype;
  int64_t *shape;
  int64_t *strides; /* NULL: compact, row-major */
  uint64_t byte_offset;
} chimepy_dl_tensor_t;

typedef struct chimepy_dl_managed_s {
  chimepy_dl_tensor_t dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct chimepy_dl_managed_s *self);
} chimepy_dl_managed_t;

#endif
