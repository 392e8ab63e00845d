// gdsroute.hpp compiles alone, included twice, under -Wall -Wextra -Werror -pedantic (built as
// C++17, C++20 and C++23, with and without -fno-exceptions).
#include <gdsroute.hpp>
#include <gdsroute.hpp>

int gdsroute_hpp_header_only_probe();
int gdsroute_hpp_header_only_probe() {
    gdsroute::Stats stats;
    auto file = gdsroute::File::try_open("/nonexistent");
    return static_cast<int>(stats.struct_size) + (file.ok() ? 1 : 0) + GDSROUTE_HPP_EXCEPTIONS;
}
