#!/bin/sh
# Checks the layout of src/ (README.md, "Layout") on a build's object files and on the sources:
#  1. no two files call each other both ways (from the objects' symbols: who calls a function
#     that whom defines);
#  2. a concept (a folder of src/, listed in src/DEPS) uses only the concepts src/DEPS lets it
#     use, by its calls and by its includes ("folder/file.h" of another folder);
#  3. only the files src/DEPS names call functions of a given prefix (SQLite's);
#  4. what a file defines outside `static` is named with a prefix src/DEPS gives its folder;
#  5. a file includes the project's headers by their path from src/ ("layers/queue/x.h"), unless
#     src/DEPS lets its folder name them from its own ("x.h");
#  6. no two files of src/ have the same name.
# It prints which concept uses which, then what breaks the rules, and exits 1 if anything does.
#   scripts/layout_check.sh SRC_DIR OBJECT...
# With LAYOUT_LIST=folder (engine/embedded, say) it also lists which file of that folder calls
# which (caller -> callees).
# The ctest test layout.check (tests/CMakeLists.txt) runs it on the objects of libkvq, the kvq
# command and libkvq_fdb_c, so that a renamed file leaves no stale object behind in the check.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 SRC_DIR OBJECT..." >&2; exit 2; }
src=$1
shift
deps="$src/DEPS"
[ -f "$deps" ] || { echo "layout_check: no $deps" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A file's name: its path under src/, from its object's path. CMake puts an object at
# <target>.dir/<path of the source under the target's directory>.o; the fdb_c library's sources
# are in src/fdbc, its own directory.
name() {
    case "$1" in
    */kvq_fdb_c.dir/*) n="fdbc/${1##*/kvq_fdb_c.dir/}" ;;
    *.dir/src/*) n="${1##*.dir/src/}" ;;
    *) n="$1" ;;
    esac
    echo "${n%.o}"
}
for o in "$@"; do
    [ -f "$o" ] || { echo "layout_check: no object $o (build first)" >&2; exit 2; }
    f=$(name "$o")
    nm -g --defined-only "$o" | awk -v f="$f" '$2 ~ /^[TDRBCVW]$/ { print $3, f }' >>"$tmp/defs"
    nm -u "$o" | awk -v f="$f" '$1 == "U" || $1 == "w" { print $2, f }' >>"$tmp/uses"
done
sort -o "$tmp/defs" "$tmp/defs"
sort -o "$tmp/uses" "$tmp/uses"
# caller callee symbol
join "$tmp/uses" "$tmp/defs" | awk '$2 != $3 { print $2, $3, $1 }' | sort -u >"$tmp/calls"
if [ -n "${LAYOUT_LIST:-}" ]; then
    echo "calls between the files of $LAYOUT_LIST (caller -> callees):"
    awk -v d="$LAYOUT_LIST/" 'index($1, d) == 1 && index($2, d) == 1 { print $1, $2 }' \
        "$tmp/calls" | sort -u |
        awk '{ a[$1] = a[$1] " " $2 } END { for (k in a) print "  " k " ->" a[k] }' | sort
fi
# Includes of the project's headers: includer header-path ["relative"] (a bare name, or a path
# found from the includer's folder, is relative; kvq/... are the public headers, for all).
# A path with a slash is the includer's folder's when the file is there (logstore/log.h from
# engine/embedded), else src/'s.
(cd "$src" && find . -name '*.[ch]' | sed 's|^\./||' | sort | while read -r f; do
    d=$(dirname "$f")
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
        grep -v '^kvq/' | while read -r h; do
        case "$h" in
        */*) if [ -f "$d/$h" ]; then echo "$f $d/$h relative $h"; else echo "$f $h"; fi ;;
        *) echo "$f $d/$h relative $h" ;;
        esac
    done
done) >"$tmp/includes"

awk -v calls="$tmp/calls" -v incs="$tmp/includes" -v defs="$tmp/defs" '
function unit(f,    best, u) {
    best = ""
    for (u in allowed)
        if (index(f, u "/") == 1 && length(u) > length(best))
            best = u
    return best == "" ? "?" : best
}
FILENAME != calls && FILENAME != incs && FILENAME != defs {
    sub(/#.*/, "")
    if (NF == 0)
        next
    if ($1 == "relative-includes") {   # relative-includes PATH: files there may
        relok[$2] = 1
        next
    }
    if ($1 == "names") {          # names PATH PREFIX...: what files under PATH name globals
        names[$2] = ""
        for (i = 3; i <= NF; i++)
            names[$2] = names[$2] " " $i
        next
    }
    if ($1 == "only") {           # only PREFIX FILE...: who may call functions named PREFIX*
        only[$2] = ""
        for (i = 3; i <= NF; i++)
            only[$2] = only[$2] " " $i " "
        next
    }
    u = $1
    sub(/:$/, "", u)
    allowed[u] = " "
    for (i = 2; i <= NF; i++)
        allowed[u] = allowed[u] $i " "
    order[++n] = u
    next
}
FILENAME == calls {
    edge[$1 " " $2] = 1
    a = unit($1); b = unit($2)
    if (a != b) {
        used[a " " b]++
        if (index(allowed[a], " " b " ") == 0)
            bad[++nbad] = "  " $1 " calls " $3 " of " $2 " (" a " may not use " b ")"
    }
    next
}
FILENAME == defs {
    best = ""
    for (pth in names)
        if ((pth == "." || index($2, pth "/") == 1) && length(pth) > length(best))
            best = pth
    if (best == "")
        next
    ok = 0
    np = split(names[best], pre, " ")
    for (i = 1; i <= np; i++)
        if (pre[i] == "*" || index($1, pre[i]) == 1)
            ok = 1
    if (!ok)
        badname[++nbadname] = "  " $2 " defines " $1 " (names there start with" names[best] ")"
    next
}
FILENAME == incs {
    a = unit($1); h = $2
    if ($3 == "relative") {
        ok = 0
        for (pth in relok)
            if (index($1, pth "/") == 1)
                ok = 1
        if (!ok)
            bad[++nbad] = "  " $1 " includes \"" $4 "\" by a path from its own folder, not " \
                "from src/"
    }
    b = unit(h)
    if (a != b && b != "?" && index(allowed[a], " " b " ") == 0)
        bad[++nbad] = "  " $1 " includes " h " (" a " may not use " b ")"
    if (b == "?")
        bad[++nbad] = "  " $1 " includes " h ", of no concept of src/DEPS"
    next
}
END {
    print "concepts of src/ and what they use (src/DEPS):"
    for (i = 1; i <= n; i++) {
        line = ""
        for (j = 1; j <= n; j++)
            if ((order[i] " " order[j]) in used)
                line = line " " order[j]
        printf "  %-24s ->%s\n", order[i], line == "" ? " (nothing)" : line
    }
    for (k in edge) {
        split(k, p, " ")
        if (p[1] < p[2] && ((p[2] " " p[1]) in edge))
            both[++nboth] = "  " p[1] " <-> " p[2]
        if (unit(p[1]) == "?")
            bad[++nbad] = "  " p[1] " is in no concept of src/DEPS"
    }
    status = 0
    if (nboth > 0) {
        print "files that call each other both ways:"
        for (i = 1; i <= nboth; i++)
            print both[i]
        status = 1
    } else {
        print "no two files call each other both ways"
    }
    if (nbadname > 0) {
        print "names src/DEPS does not allow:"
        for (i = 1; i <= nbadname; i++)
            print badname[i]
        status = 1
    }
    if (nbad > 0) {
        print "uses src/DEPS does not allow:"
        for (i = 1; i <= nbad; i++)
            print bad[i]
        status = 1
    } else {
        print "every concept uses only what src/DEPS allows"
    }
    exit status
}' "$deps" "$tmp/calls" "$tmp/includes" "$tmp/defs" || status=1
status=${status:-0}

# Prefix rules: only the files named call functions of the prefix, and only they name it in
# their source (as the embedded engine's SQLite storage does for sqlite3_ and <sqlite3.h>).
grep '^only' "$deps" | while read -r _ prefix files; do
    files=$(echo "$files" | sed 's/#.*//')
    callers=$(awk -v p="$prefix" 'index($1, p) == 1 { print $2 }' "$tmp/uses" | sort -u |
        tr '\n' ' ')
    mention=$(cd "$src" && grep -rl --include='*.[ch]' "$prefix" . | sed 's|^\./||' | sort -u |
        tr '\n' ' ')
    echo "files that call $prefix*: $callers"
    for f in $callers $mention; do
        case " $files " in
        *" ${f%.[ch]}.c "* | *" $f "*) ;;
        *) echo "  $f uses $prefix*, which only $files may"; echo fail >>"$tmp/only" ;;
        esac
    done
done
dups=$(cd "$src" && find . -name '*.[ch]' | sed 's|.*/||' | sort | uniq -d | tr '\n' ' ')
if [ -n "$dups" ]; then
    echo "names of more than one file of src/: $dups"
    status=1
fi
[ -f "$tmp/only" ] && status=1
exit "$status"
