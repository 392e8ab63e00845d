/* LD_PRELOAD shim for test_hdf5_errors' enosys mode: flock(2) fails with ENOSYS, as on a file
 * system without locks (Lustre mounted without flock, some FUSE file systems). */
#include <errno.h>

int flock(int fd, int operation);

int flock(int fd, int operation) {
    (void)fd;
    (void)operation;
    errno = ENOSYS;
    return -1;
}
