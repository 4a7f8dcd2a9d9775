#!/bin/sh
# Checks the embedded engine's layout (docs/engine.md, "Layout") on a build's object files:
# which of its files (and of the log store's, logstore/) call functions defined in which others,
# that no two files call each other both ways, and that only the SQLite storage's file calls
# SQLite.
#   src/engine/embedded/layout_check.sh [build-dir]      (default: build)
set -eu
build=${1:-build}
objdir="$build/CMakeFiles/kvq_obj.dir/src/engine/embedded"
[ -d "$objdir" ] || { echo "layout_check: no objects in $objdir (build first)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
objs() {
    for o in "$objdir"/*.o "$objdir"/logstore/*.o; do
        if [ -e "$o" ]; then echo "$o"; fi
    done
}
# a file's name: its path under src/engine/embedded (logstore/log.c)
name() {
    echo "${1#"$objdir"/}" | sed 's/\.o$//'
}
objs | while read -r o; do
    f=$(name "$o")
    nm -g --defined-only "$o" | awk -v f="$f" '$2 ~ /^[TDRB]$/ { print $3, f }'
done | sort >"$tmp/defs"
objs | while read -r o; do
    f=$(name "$o")
    nm -u "$o" | awk -v f="$f" '{ print $2, f }'
done | sort >"$tmp/uses"
# caller callee, once per pair
join "$tmp/uses" "$tmp/defs" | awk '$2 != $3 { print $2, $3 }' | sort -u >"$tmp/edges"
echo "calls between the embedded engine's files (caller -> callee):"
awk '{ a[$1] = a[$1] " " $2 } END { for (k in a) print "  " k " ->" a[k] }' "$tmp/edges" | sort
status=0
both=$(awk '{ e[$1 " " $2] = 1 } END { for (k in e) { split(k, p, " "); if ((p[2] " " p[1]) in e && p[1] < p[2]) print "  " p[1] " <-> " p[2] } }' "$tmp/edges")
if [ -n "$both" ]; then
    echo "files that call each other both ways:"
    echo "$both"
    status=1
else
    echo "no two files call each other both ways"
fi
src=$(dirname "$0")
sq=$(grep -l 'sqlite3_\|sqlite3\.h' "$src"/*.c "$src"/*.h "$src"/logstore/*.c "$src"/logstore/*.h |
    sed "s|^$src/||" | tr '\n' ' ')
echo "files that use SQLite: $sq"
[ "$sq" = "store_sqlite.c " ] || status=1
sqo=$(objs | while read -r o; do nm -u "$o" | grep -q ' sqlite3_' && name "$o"; done | tr '\n' ' ')
echo "objects that call SQLite: $sqo"
[ "$sqo" = "store_sqlite.c " ] || status=1
exit $status
