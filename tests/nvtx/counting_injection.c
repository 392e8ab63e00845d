/* An NVTX tool of the tests' own (tests/nvtx.rs): loaded through NVTX_INJECTION64_PATH, it asks
 * the library for its CORE2 function table, as a profiler does, puts its own functions in the
 * domain slots, and at exit writes what it saw to the file NVTX_TEST_OUT names: the domains
 * created, the process ranges started and ended with their payloads, and the thread ranges pushed
 * and popped (a pop without its push is counted as unbalanced). */
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*slot_fn)(void);
typedef struct {
    size_t struct_size;
    int (*get_module_function_table)(int module, slot_fn ***out_table, unsigned *out_size);
} callbacks_table;
typedef struct {
    size_t struct_size;
    uint32_t version, reserved0;
    void (*set_injection_nvtx_version)(uint32_t);
} version_table;
typedef struct {
    uint16_t version, size;
    uint32_t category;
    int32_t color_type;
    uint32_t color;
    int32_t payload_type, reserved0;
    uint64_t payload;
    int32_t message_type;
    const char *message;
} event_attributes;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char domain_name[64];
static uint64_t starts, ends, pushes, pops, call_bytes, task_bytes, bad_attributes, next_id = 1;
static __thread int depth;
static uint64_t unbalanced, version_seen;
static char last_call[64], last_task[64];
static int the_domain;

static void *domain_create(const char *name) {
    pthread_mutex_lock(&lock);
    snprintf(domain_name, sizeof domain_name, "%s", name ? name : "(null)");
    pthread_mutex_unlock(&lock);
    return &the_domain;
}
static int check(void *domain, const event_attributes *a) {
    return domain == &the_domain && a && a->version == 3 && a->size == sizeof *a && a->message_type == 1 && a->payload_type == 1 && a->message;
}
static uint64_t range_start(void *domain, const event_attributes *a) {
    pthread_mutex_lock(&lock);
    if (!check(domain, a)) bad_attributes++;
    starts++;
    call_bytes += a ? a->payload : 0;
    if (a && a->message) snprintf(last_call, sizeof last_call, "%s", a->message);
    uint64_t id = next_id++;
    pthread_mutex_unlock(&lock);
    return id;
}
static void range_end(void *domain, uint64_t id) {
    pthread_mutex_lock(&lock);
    if (domain != &the_domain || id == 0 || id >= next_id) bad_attributes++;
    ends++;
    pthread_mutex_unlock(&lock);
}
static int range_push(void *domain, const event_attributes *a) {
    depth++;
    pthread_mutex_lock(&lock);
    if (!check(domain, a)) bad_attributes++;
    pushes++;
    task_bytes += a ? a->payload : 0;
    if (a && a->message) snprintf(last_task, sizeof last_task, "%s", a->message);
    pthread_mutex_unlock(&lock);
    return depth;
}
static int range_pop(void *domain) {
    pthread_mutex_lock(&lock);
    if (domain != &the_domain) bad_attributes++;
    pops++;
    if (depth == 0) unbalanced++;
    pthread_mutex_unlock(&lock);
    return depth > 0 ? --depth : -1;
}

static void report(void) {
    const char *path = getenv("NVTX_TEST_OUT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) return;
    fprintf(f, "domain=%s starts=%" PRIu64 " ends=%" PRIu64 " pushes=%" PRIu64 " pops=%" PRIu64 " call_bytes=%" PRIu64
               " task_bytes=%" PRIu64 " bad=%" PRIu64 " unbalanced=%" PRIu64 " version=%" PRIu64 " last_call=%s last_task=%s\n",
            domain_name, starts, ends, pushes, pops, call_bytes, task_bytes, bad_attributes, unbalanced, version_seen, last_call, last_task);
    fclose(f);
}

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(const void *(*get_export_table)(uint32_t)) {
    const version_table *v = get_export_table(3);
    if (v && v->struct_size >= sizeof *v) version_seen = v->version;
    const callbacks_table *cb = get_export_table(1);
    if (!cb || cb->struct_size < sizeof *cb) return 0;
    slot_fn **table = NULL;
    unsigned size = 0;
    if (!cb->get_module_function_table(5 /* CORE2 */, &table, &size) || size < 13) return 0;
    *table[12] = (slot_fn)domain_create;
    *table[2] = (slot_fn)range_start;
    *table[3] = (slot_fn)range_end;
    *table[4] = (slot_fn)range_push;
    *table[5] = (slot_fn)range_pop;
    atexit(report);
    return 1;
}
