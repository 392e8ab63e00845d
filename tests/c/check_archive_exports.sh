#!/bin/sh
# check_archive_exports.sh ARCHIVE HEADER: the static archive defines exactly the functions the
# header declares as global symbols (all named gdsroute_*) and nothing else, so that its Rust std
# and crates cannot clash with another Rust static library of the program
# (cmake/gdsroute-localize-archive.cmake). Undefined references (libc, the unwinder) may remain,
# and one more definition must: DW.ref.rust_eh_personality, weak and hidden, the signature of the
# archive's one COMDAT group (see the CMake script). The functions carry no symbol version (those
# belong to libgdsroute.so, src/gdsroute.map): a versioned name in an archive keeps a program from
# linking it into a shared object of its own ("version node not found"), which is tried last.
set -eu
archive=$1 header=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Lines "ADDRESS TYPE NAME" for each member; member headers and blank lines have fewer fields.
nm -g --defined-only "$archive" 2>/dev/null | awk 'NF >= 3 {print $NF}' | sort -u >"$tmp/defined"
grep -o 'gdsroute_[a-z0-9_]*(' "$header" | tr -d '(' | sort -u >"$tmp/declared"
unavoidable=DW.ref.rust_eh_personality
grep -qx "$unavoidable" "$tmp/defined" && sed -i "/^$unavoidable\$/d" "$tmp/defined"
echo "global symbols defined: $(wc -l <"$tmp/defined"); declared in the header: $(wc -l <"$tmp/declared") functions"

status=0
if grep -v '^gdsroute_' "$tmp/defined" >"$tmp/foreign"; then
    echo "FAIL: $(wc -l <"$tmp/foreign") global symbols outside gdsroute_* are defined, e.g.:"
    head -n 20 "$tmp/foreign" | sed 's/^/  /'
    status=1
fi
if ! cmp -s "$tmp/defined" "$tmp/declared"; then
    echo "FAIL: defined global symbols and header declarations differ (< archive only, > header only):"
    diff "$tmp/defined" "$tmp/declared" | grep '^[<>]' | head -n 40 | sed 's/^/  /' || true
    status=1
fi
# A plugin of the program's own, built as a shared object around the archive.
cc=${CC:-cc}
printf '#include "gdsroute.h"\nunsigned plugin_major(void) { return gdsroute_version_major(); }\n' >"$tmp/plugin.c"
if ! "$cc" -shared -fPIC -I"$(dirname "$header")" "$tmp/plugin.c" "$archive" -o "$tmp/plugin.so" \
        -ldl -lpthread -lm -lrt -lutil >"$tmp/link.log" 2>&1; then
    echo "FAIL: the archive does not link into a shared object:"
    sed 's/^/  /' "$tmp/link.log" | head -n 10
    status=1
fi
[ $status -eq 0 ] && echo "1 passed, 0 failed"
exit $status
