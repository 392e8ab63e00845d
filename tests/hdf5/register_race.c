/* LD_PRELOAD shim for test_hdf5_register's race modes: H5FDregister of the class named
 * "gdsroute" (the driver's own call; HDF5's internal registrations do not come through here)
 * races as two first uses of the driver can.
 *
 *   REGISTER_RACE=threads  the first call waits (up to 5 s) for a second one, then both go on:
 *                          two threads both register before either has stored its identifier
 *   REGISTER_RACE=nested   the first call first runs H5FD_gdsroute_init itself: another
 *                          registration completes between the caller's check and its store
 *
 * register_race_calls() gives the number of such calls. */
#include <dlfcn.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int register_race_calls(void);
hid_t H5FDregister(const H5FD_class_t *cls);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t arrived = PTHREAD_COND_INITIALIZER;
static int calls;

int register_race_calls(void) {
    pthread_mutex_lock(&lock);
    int n = calls;
    pthread_mutex_unlock(&lock);
    return n;
}

hid_t H5FDregister(const H5FD_class_t *cls) {
    hid_t (*real)(const H5FD_class_t *) = (hid_t (*)(const H5FD_class_t *))dlsym(RTLD_NEXT, "H5FDregister");
    if (real == NULL) return H5I_INVALID_HID;
    if (cls == NULL || cls->name == NULL || strcmp(cls->name, "gdsroute") != 0) return real(cls);
    const char *mode = getenv("REGISTER_RACE");
    pthread_mutex_lock(&lock);
    int n = ++calls;
    if (mode != NULL && strcmp(mode, "threads") == 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 5;
        pthread_cond_broadcast(&arrived);
        while (calls < 2 && pthread_cond_timedwait(&arrived, &lock, &until) == 0) {
        }
    }
    pthread_mutex_unlock(&lock);
    if (n == 1 && mode != NULL && strcmp(mode, "nested") == 0) {
        hid_t (*init)(void) = (hid_t (*)(void))dlsym(RTLD_DEFAULT, "H5FD_gdsroute_init");
        if (init != NULL) (void)init();
    }
    return real(cls);
}
