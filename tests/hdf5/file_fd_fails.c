/* LD_PRELOAD shim for test_hdf5_errors' fd-fails mode: gdsroute_file_fd fails (as for a closed
 * handle), so the driver's open fails after gdsroute_file_open succeeded. */
#include <gdsroute.h>

gdsroute_status gdsroute_file_fd(const gdsroute_file *file, int *fd) {
    (void)file;
    (void)fd;
    return GDSROUTE_STATUS_CLOSED_HANDLE;
}
