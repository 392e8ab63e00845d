// The C++ wrappers return what the C call wrote through its out-parameter, not the value the
// variable had before the call. This machine has no GPU, so the library reports HOST memory for
// every pointer; the C calls below are defined here instead, each writing a value that differs
// from what the wrapper's variable starts with. The executable's definitions are the ones its
// inline wrappers bind to (and interpose on the shared library's).
#include <gdsroute.hpp>

#include "check.h"

#include <cstdint>

extern "C" {

gdsroute_status gdsroute_memory_kind(const void *ptr, uint32_t *kind) {
    (void)ptr;
    *kind = GDSROUTE_OBSERVED_MEMORY_DEVICE;
    return GDSROUTE_STATUS_OK;
}

gdsroute_status gdsroute_buffer_references(const void *ptr, uint64_t *references) {
    (void)ptr;
    *references = 7;
    return GDSROUTE_STATUS_OK;
}

gdsroute_status gdsroute_bounce_buffer_free(size_t *bytes_freed) {
    *bytes_freed = 4096;
    return GDSROUTE_STATUS_OK;
}

gdsroute_status gdsroute_page_cache_info(const char *path, uint64_t file_offset, uint64_t length,
                                         uint64_t *resident_pages, uint64_t *total_pages) {
    (void)path;
    (void)file_offset;
    (void)length;
    *resident_pages = 3;
    *total_pages = 5;
    return GDSROUTE_STATUS_OK;
}

gdsroute_status gdsroute_supports_direct_io(const char *path, bool *supported) {
    (void)path;
    *supported = true;
    return GDSROUTE_STATUS_OK;
}

gdsroute_status gdsroute_settings_get_compat_mode(uint32_t *mode) {
    *mode = GDSROUTE_COMPAT_MODE_AUTO;
    return GDSROUTE_STATUS_OK;
}

gdsroute_status gdsroute_settings_get_stream_ordered(uint32_t *mode) {
    *mode = GDSROUTE_STREAM_ORDERED_ON;
    return GDSROUTE_STATUS_OK;
}

gdsroute_status gdsroute_settings_get_cufile_fd(uint32_t *fd) {
    *fd = GDSROUTE_CUFILE_FD_BUFFERED;
    return GDSROUTE_STATUS_OK;
}

gdsroute_status gdsroute_settings_get_task_size(size_t *size) {
    *size = 12345;
    return GDSROUTE_STATUS_OK;
}

} // extern "C"

int main() {
    int device_buffer = 0;
    auto kind = gdsroute::try_memory_kind(&device_buffer);
    CHECK(kind.ok() && kind.value() == gdsroute::MemoryKind::DEVICE);
    auto references = gdsroute::try_buffer_references(&device_buffer);
    CHECK(references.ok() && references.value() == 7);
    auto freed = gdsroute::try_bounce_buffer_free();
    CHECK(freed.ok() && freed.value() == 4096);
    auto pages = gdsroute::try_get_page_cache_info("any", 0, 0);
    CHECK(pages.ok() && pages.value().first == 3 && pages.value().second == 5);
    auto direct = gdsroute::try_supports_direct_io("any");
    CHECK(direct.ok() && direct.value());
    auto compat = gdsroute::settings::try_compat_mode();
    CHECK(compat.ok() && compat.value() == gdsroute::CompatMode::AUTO);
    auto ordered = gdsroute::settings::try_stream_ordered();
    CHECK(ordered.ok() && ordered.value() == gdsroute::StreamOrderedMode::ON);
    auto cufile_fd = gdsroute::settings::try_cufile_fd();
    CHECK(cufile_fd.ok() && cufile_fd.value() == gdsroute::CufileFd::BUFFERED);
    auto task_size = gdsroute::settings::try_task_size();
    CHECK(task_size.ok() && task_size.value() == 12345);
#if GDSROUTE_HPP_EXCEPTIONS
    CHECK(gdsroute::memory_kind(&device_buffer) == gdsroute::MemoryKind::DEVICE);
    CHECK(gdsroute::buffer_references(&device_buffer) == 7);
    CHECK(gdsroute::settings::compat_mode() == gdsroute::CompatMode::AUTO);
#endif
    return check_summary();
}
