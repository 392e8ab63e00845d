/* LD_PRELOAD shim for test_hdf5_errors' kind-fails mode: gdsroute_memory_kind fails with
 * CUDA_ERROR, as it does when the CUDA driver fails otherwise than "not CUDA memory". It replaces
 * the C ABI function the driver calls; gdsroute's own routing classifies inside the library and
 * is untouched. */
#include <gdsroute.h>

gdsroute_status gdsroute_memory_kind(const void *ptr, uint32_t *kind) {
    (void)ptr;
    (void)kind;
    return GDSROUTE_STATUS_CUDA_ERROR;
}
