#!/bin/bash
# make test-install: a program built against the herd installed in PREFIX
# with pkg-config's flags alone (shared library, then static), run; the
# installed headers compile on their own; the library exports herd_* only.
# usage: tests/install/check.sh PREFIX
set -u
prefix=$1
here=$(cd "$(dirname "$0")" && pwd)
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
fail=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fail=1; }

if ! flags=$(pkg-config --cflags --libs herd 2>&1); then
    bad "pkg-config herd: $flags"; exit 1
fi
# shellcheck disable=SC2086 # pkg-config's flags are words
# the README's line, as written there (the run-time path from pkg-config too)
# shellcheck disable=SC2046
if cc -std=c11 -Wall -Werror "$here/embed.c" $flags -Wl,-rpath,$(pkg-config --variable=libdir herd) -o "$prefix/embed" \
        2>"$prefix/cc.txt" &&
    out=$(timeout 120 "$prefix/embed" 2>"$prefix/embed.err") && printf '%s\n' "$out" | grep -q '^allreduce threads 2 workers test_acc'; then
    ok "a program linked with \$(pkg-config --cflags --libs herd) (libherd.so): $out"
else
    bad "a program linked with pkg-config's flags: $(cat "$prefix/cc.txt") ${out:-} $(cat "$prefix/embed.err" 2>/dev/null)"
fi
# the library is silent unless asked: embed.c leaves quiet at its default
if [ -f "$prefix/embed.err" ] && [ ! -s "$prefix/embed.err" ]; then
    ok "the library wrote nothing on stderr at its defaults"
else
    bad "the library wrote on stderr at its defaults: $(head -c 300 "$prefix/embed.err" 2>/dev/null)"
fi
# shellcheck disable=SC2046,SC2086
if cc -std=c11 -Wall -Werror "$here/embed.c" $(pkg-config --cflags herd) "$prefix/lib/libherd.a" \
        $(pkg-config --static --libs-only-other --libs-only-l herd | sed 's/-lherd//') -o "$prefix/embed-static" \
        2>"$prefix/cc.txt" && out=$(timeout 120 "$prefix/embed-static" 2>&1); then
    ok "the same, linked with libherd.a and pkg-config --static's flags: $out"
else
    bad "linked with libherd.a: $(cat "$prefix/cc.txt") ${out:-}"
fi
headers=0 alone=0
for h in "$prefix"/include/herd/*.h; do
    headers=$((headers + 1))
    if printf '#include <herd/%s>\n' "$(basename "$h")" | cc -std=c11 -Wall -Werror -I"$prefix/include" -x c -c - -o /dev/null; then
        alone=$((alone + 1))
    else
        bad "$(basename "$h") does not compile on its own"
    fi
done
[ "$headers" -gt 0 ] && [ "$alone" = "$headers" ] && ok "every installed header compiles on its own ($headers headers)"
# herd.h, the one include, brings every other header
missing=""
for h in "$prefix"/include/herd/*.h; do
    b=$(basename "$h")
    [ "$b" = herd.h ] || grep -q "^#include \"herd/$b\"" "$prefix/include/herd/herd.h" 2>/dev/null || missing="$missing $b"
done
if [ -f "$prefix/include/herd/herd.h" ] && [ -z "$missing" ]; then
    ok "herd.h includes every public header"
else
    bad "herd.h is missing or leaves out:$missing"
fi
internal=$(nm -D --defined-only "$prefix/lib/libherd.so" | awk '{ print $3 }' | grep -c '^herd__')
public=$(nm -D --defined-only "$prefix/lib/libherd.so" | awk '{ print $3 }' | grep -c '^herd_')
if [ "$internal" -eq 0 ] && [ "$public" -gt 20 ]; then
    ok "libherd.so exports $public herd_* symbols and no herd__ internals"
else
    bad "libherd.so exports $internal internal and $public public symbols"
fi
exit $fail
