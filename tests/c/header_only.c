/* The header compiles alone, included twice, under -Wall -Wextra -Werror -pedantic (this file is
 * built as C99, C11, C17, C++11, C++17 and C++20, and as C99 with -Wc++-compat). */
#include <gdsroute.h>
#include <gdsroute.h>

int gdsroute_header_only_probe(void);
int gdsroute_header_only_probe(void) {
    gdsroute_stats stats;
    stats.struct_size = sizeof stats;
    gdsroute_status status = GDSROUTE_STATUS_INVALID_SETTING;
    gdsroute_fallback_reason reason = GDSROUTE_FALLBACK_REASON_NO_UDEV;
    return (int)stats.struct_size + GDSROUTE_STATUS_OK + GDSROUTE_STATS_FORMAT_JSON +
           GDSROUTE_COMPAT_MODE_AUTO + GDSROUTE_VERSION + (int)status + (int)reason;
}
