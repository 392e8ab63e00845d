/*
 * exit_watch: what a process is doing when it dies at exit. Linked into the exit test programs
 * (tests/exit/exit_paths.c, tools/probes/cufile_exit_probe.c); the program must be linked with
 * -rdynamic so that the interposed __cxa_atexit below is the one every library calls.
 *
 * - Every exit-time destructor registration (__cxa_atexit: C++ static objects, atexit handlers)
 *   is recorded with the library it belongs to, the thread that registered it and the phase the
 *   program was in; at exit each runs through a trampoline that records which one is running.
 * - Thread-local destructor registrations (__cxa_thread_atexit_impl) are recorded the same way.
 * - A crash handler (SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE) prints the crashing thread's id
 *   and name, the faulting address, the instruction pointer and a backtrace as library+offset,
 *   the program's phase, the destructor running at that moment and every thread alive, then
 *   dies of the same signal (the exit status stays 128+signal).
 * - EXIT_WATCH_LOG=1 also prints every registration as it happens and every destructor as it
 *   runs.
 * - Built as a shared object it can be preloaded into a program that is not ours (KvikIO's
 *   Python process, tools/probes/run_exit_differences.sh); the product never needs a preload.
 */
#define _GNU_SOURCE
#include "exit_watch.h"

#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define MAX_RECORDS 65536

struct record {
    void (*func)(void *);
    void *arg;
    int seq;
    int tid;
    char thread[16];
    const char *phase;
    double at;
};

static struct record records[MAX_RECORDS];
static atomic_int n_records;
static _Atomic(struct record *) running_dtor;
static _Atomic(const char *) phase = "start";
static double t_start;
static int log_registrations;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int gettid_(void) { return (int)syscall(SYS_gettid); }

/* Writes without stdio (usable in the crash handler). */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) {
        ssize_t ignored = write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
        (void)ignored;
    }
}

/* "libcufile.so.0+0x14033b" for an address. */
static void where(const void *addr, char *out, size_t len) {
    Dl_info info;
    if (addr && dladdr(addr, &info) && info.dli_fname) {
        const char *base = strrchr(info.dli_fname, '/');
        snprintf(out, len, "%s+0x%lx", base ? base + 1 : info.dli_fname,
                 (unsigned long)((uintptr_t)addr - (uintptr_t)info.dli_fbase));
    } else {
        snprintf(out, len, "%p", addr);
    }
}

void exit_watch_phase(const char *name) {
    atomic_store(&phase, name);
    if (log_registrations) say("[exit_watch] phase %s at %.3f s\n", name, now() - t_start);
}

static void describe(const char *kind, const struct record *r);

static void trampoline(void *p) {
    struct record *r = p;
    if (log_registrations) describe("runs", r);
    struct record *outer = atomic_exchange(&running_dtor, r);
    r->func(r->arg);
    atomic_store(&running_dtor, outer);
}

static struct record *remember(void (*func)(void *), void *arg) {
    int i = atomic_fetch_add(&n_records, 1);
    if (i >= MAX_RECORDS) return NULL;
    struct record *r = &records[i];
    r->func = func;
    r->arg = arg;
    r->seq = i;
    r->tid = gettid_();
    prctl(PR_GET_NAME, r->thread, 0, 0, 0);
    r->phase = atomic_load(&phase);
    r->at = now() - t_start;
    return r;
}

static void describe(const char *kind, const struct record *r) {
    char w[256];
    where((const void *)r->func, w, sizeof w);
    say("[exit_watch] %s #%d %s registered by thread %d (%s) in phase '%s' at %.3f s\n", kind, r->seq, w, r->tid,
        r->thread, r->phase, r->at);
}

int __cxa_atexit(void (*func)(void *), void *arg, void *dso) {
    static int (*real)(void (*)(void *), void *, void *);
    if (!real) real = (int (*)(void (*)(void *), void *, void *))dlsym(RTLD_NEXT, "__cxa_atexit");
    struct record *r = remember(func, arg);
    if (!r) return real(func, arg, dso);
    if (log_registrations) describe("exit destructor", r);
    return real(trampoline, r, dso);
}

int __cxa_thread_atexit_impl(void (*func)(void *), void *obj, void *dso) {
    static int (*real)(void (*)(void *), void *, void *);
    if (!real) real = (int (*)(void (*)(void *), void *, void *))dlsym(RTLD_NEXT, "__cxa_thread_atexit_impl");
    struct record *r = remember(func, obj);
    if (!r) return real(func, obj, dso);
    if (log_registrations) describe("thread-local destructor", r);
    return real(trampoline, r, dso);
}

void exit_watch_threads(const char *label) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return;
    char line[2048];
    size_t used = (size_t)snprintf(line, sizeof line, "[exit_watch] threads %s:", label);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[300], name[32] = "?";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            ssize_t n = read(fd, name, sizeof name - 1);
            close(fd);
            if (n > 0) name[name[n - 1] == '\n' ? n - 1 : n] = 0;
        }
        if (used < sizeof line) used += (size_t)snprintf(line + used, sizeof line - used, " %s:%s", e->d_name, name);
    }
    closedir(d);
    say("%s\n", line);
}

int exit_watch_count_threads_named(const char *prefix) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[300], name[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        ssize_t n = read(fd, name, sizeof name - 1);
        close(fd);
        if (n > 0) name[name[n - 1] == '\n' ? n - 1 : n] = 0;
        if (strncmp(name, prefix, strlen(prefix)) == 0) count++;
    }
    closedir(d);
    return count;
}

static void on_crash(int sig, siginfo_t *info, void *context) {
    char name[16] = "?";
    prctl(PR_GET_NAME, name, 0, 0, 0);
    ucontext_t *uc = context;
    void *pc = (void *)(uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    char w[256];
    where(pc, w, sizeof w);
    say("[exit_watch] CRASH signal %d in thread %d (%s), fault address %p, pc %s, phase '%s', %.3f s after start\n", sig,
        gettid_(), name, info->si_addr, w, atomic_load(&phase), now() - t_start);
    struct record *r = atomic_load(&running_dtor);
    if (r) describe("running exit destructor", r);
    else say("[exit_watch] no exit destructor running\n");
    void *frames[32];
    int n = backtrace(frames, 32);
    for (int i = 0; i < n; i++) {
        where(frames[i], w, sizeof w);
        say("[exit_watch]   #%d %s\n", i, w);
    }
    exit_watch_threads("at crash");
    signal(sig, SIG_DFL);
    raise(sig);
}

static void last_handler(void) { exit_watch_phase("exit: handlers registered before any library ran (last)"); }

__attribute__((constructor)) static void exit_watch_init(void) {
    t_start = now();
    const char *v = getenv("EXIT_WATCH_LOG");
    log_registrations = v && v[0] == '1';
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_crash;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
    atexit(last_handler);
}

void exit_watch_summary(const char *dso_substring) {
    int n = atomic_load(&n_records);
    if (n > MAX_RECORDS) n = MAX_RECORDS;
    for (int i = 0; i < n; i++) {
        char w[256];
        where((const void *)records[i].func, w, sizeof w);
        if (!dso_substring || strstr(w, dso_substring)) describe("registration", &records[i]);
    }
}
