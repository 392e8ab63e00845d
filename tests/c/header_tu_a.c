/* Two translation units include the header and are linked together: nothing it declares may be
 * defined in the header. */
#include <gdsroute.h>

const char *gdsroute_tu_a_version(void);
const char *gdsroute_tu_a_version(void) { return gdsroute_version_string(); }
