#!/bin/sh
# scripts/layout_check.sh can fail: over a small made-up src/ it passes when calls go one way and
# fails on two files calling each other both ways, on a concept using one src/DEPS does not
# list (by a call, and by an include), on a prefix called from a file not named for it, and on
# a global name without its folder's prefix, and on two files of one name.
#   scripts/tests/layout_check.sh [CC]
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cc=${1:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src="$tmp/src"
mkdir -p "$src/top" "$src/low"
fails=0

# One case: the DEPS text, then "pass" or "fail", then the sources as name=text pairs.
case_of() {
    what=$1 case_deps=$2 want=$3
    shift 3
    rm -rf "$src" "$tmp/obj"
    mkdir -p "$src/top" "$src/low" "$tmp/obj/x.dir/src/top" "$tmp/obj/x.dir/src/low"
    printf "%s\n" "$case_deps" >"$src/DEPS"
    for pair in "$@"; do
        f=${pair%%=*}
        printf '%s\n' "${pair#*=}" >"$src/$f"
    done
    objs=""
    for f in "$src"/top/*.c "$src"/low/*.c; do
        rel=${f#"$src"/}
        "$cc" -c -I"$src" -o "$tmp/obj/x.dir/src/$rel.o" "$f"
        objs="$objs $tmp/obj/x.dir/src/$rel.o"
    done
    # shellcheck disable=SC2086
    if sh "$here/layout_check.sh" "$src" $objs >"$tmp/out" 2>&1; then got=pass; else got=fail; fi
    if [ "$got" = "$want" ]; then
        echo "ok: $what ($got)"
    else
        echo "FAILED: $what: expected $want, got $got"
        sed 's/^/    /' "$tmp/out"
        fails=$((fails + 1))
    fi
}

deps='top: low
low:
only ext_ low/b.c'
a_calls_b='top/a.c=int b(void); int a(void); int a(void) { return b(); }'
b_alone='low/b.c=int b(void); int b(void) { return 1; }'
b_calls_a='low/b.c=int a(void); int b(void); int c(void);
int b(void) { return 0; } int c(void) { return a(); }'
case_of "one way, as allowed" "$deps" pass "$a_calls_b" "$b_alone"
case_of "a concept using one not listed" "top:
low:" fail "$a_calls_b" "$b_alone"
case_of "two files both ways" "top: low
low: top" fail "$a_calls_b" "$b_calls_a"
case_of "an include of a concept not listed" "$deps" fail "$a_calls_b" "$b_alone" \
    'low/h.h=int h(void);' 'low/c.c=#include "top/t.h"
int c(void); int c(void) { return 0; }' 'top/t.h=int t(void);'
case_of "a prefix called from a file not named" "$deps" fail \
    'top/a.c=int ext_x(void); int a(void); int a(void) { return ext_x(); }' \
    'low/b.c=int ext_x(void); int ext_x(void) { return 0; }'
case_of "names with their folder's prefixes" "$deps
names . k_
names top t_ k_" pass 'top/a.c=int t_a(void); int t_a(void) { return 0; }' \
    'low/b.c=int k_b(void); int k_b(void) { return 1; }'
case_of "a name without its folder's prefix" "$deps
names . k_
names top t_" fail 'top/a.c=int t_a(void); int t_a(void) { return 0; }' \
    'low/b.c=int b(void); int b(void) { return 1; }'
case_of "two files of one name" "$deps" fail "$a_calls_b" "$b_alone" 'top/b.c=int bb(void);'
[ "$fails" -eq 0 ] || exit 1
echo "layout check self-test: all cases as expected"
