#!/bin/sh
# check_exports.sh LIB HEADER MAJOR: the shared library exports exactly the functions the header
# declares (all named gdsroute_*), nothing else, each with a GDSROUTE_* symbol version
# (src/gdsroute.map), and its soname is libgdsroute.so.MAJOR.
set -eu
lib=$1 header=$2 major=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | sort -u >"$tmp/exported"
grep -o 'gdsroute_[a-z0-9_]*(' "$header" | tr -d '(' | sort -u >"$tmp/declared"
echo "exported: $(wc -l <"$tmp/exported") symbols; declared in the header: $(wc -l <"$tmp/declared") functions"

status=0
if nm -D --defined-only "$lib" | awk '{print $NF}' | grep -v '@@GDSROUTE_[0-9.]*$' >"$tmp/unversioned"; then
    echo "FAIL: symbols without a GDSROUTE_* version:"; sed 's/^/  /' "$tmp/unversioned"; status=1
fi
if grep -v '^gdsroute_' "$tmp/exported" >"$tmp/foreign"; then
    echo "FAIL: symbols outside gdsroute_* are exported:"; sed 's/^/  /' "$tmp/foreign"; status=1
fi
if ! cmp -s "$tmp/exported" "$tmp/declared"; then
    echo "FAIL: exported symbols and header declarations differ (< exported only, > header only):"
    diff "$tmp/exported" "$tmp/declared" | grep '^[<>]' | sed 's/^/  /' || true
    status=1
fi
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
if [ "$soname" != "libgdsroute.so.$major" ]; then
    echo "FAIL: soname is '$soname', expected libgdsroute.so.$major"; status=1
else
    echo "soname: $soname"
fi
[ $status -eq 0 ] && echo "1 passed, 0 failed"
exit $status
