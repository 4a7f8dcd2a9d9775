#!/usr/bin/env bash
# kvq installed to one prefix, then moved to another: pkg-config still finds the headers and the
# library there (kvq.pc is relative to its own place), and a program built with its flags runs.
# Usage: test_pc.sh BUILD-DIR
set -u
BUILD="$1"
T="$(mktemp -d /tmp/kvq-pc-XXXXXX)"
trap 'rm -rf "$T"' EXIT
pass=0
fail=0
check() { # check NAME COMMAND...
    local name="$1"; shift
    if "$@"; then pass=$((pass + 1)); echo "ok   - $name"; else fail=$((fail + 1)); echo "FAIL - $name"; fi
}
cmake --install "$BUILD" --prefix "$T/first" >"$T/install.log" 2>&1
check "install to a prefix" test -f "$(find "$T/first" -name kvq.pc | head -1)"
mv "$T/first" "$T/moved"
pc="$(find "$T/moved" -name kvq.pc | head -1)"
export PKG_CONFIG_PATH="$(dirname "$pc")"
check "kvq.pc names no absolute prefix" bash -c "! grep -q '$T/first' '$pc'"
check "pkg-config finds the moved headers" bash -c "pkg-config --cflags kvq | grep -q -- '-I$T/moved'"
cat >"$T/prog.c" <<'CEOF'
#include <kvq/kvq.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    return strcmp(kvq_version(), "") != 0 && kvq_errname(1020)[0] == 'n' ? 0 : 1;
}
CEOF
# The build's own compiler, and its sanitizers when it has them (the library needs their runtime).
CC_="$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")"
TYPE_="$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt")"
EXTRA=()
[ "$TYPE_" = Sanitize ] && EXTRA=(-fsanitize=address,undefined)
[ "$TYPE_" = Tsan ] && EXTRA=(-fsanitize=thread)
"${CC_:-cc}" "${EXTRA[@]}" "$T/prog.c" -o "$T/prog" $(pkg-config --cflags --libs kvq) 2>"$T/cc.log"
check "a program builds with pkg-config's flags" test -x "$T/prog"
libdir="$(pkg-config --variable=libdir kvq)"
check "and runs against the moved library" env LD_LIBRARY_PATH="$libdir" "$T/prog"
# Without LD_LIBRARY_PATH a prefix the loader does not search is not found: what the README says
# and the two ways out it gives (the one above, and an rpath).
env -u LD_LIBRARY_PATH "$T/prog" 2>"$T/run.err"
if ldconfig -p 2>/dev/null | grep -q 'libkvq\.so\.0 '; then
    echo "skip - without LD_LIBRARY_PATH (a libkvq.so.0 is installed where the loader looks)"
else
check "without LD_LIBRARY_PATH: libkvq.so.0 not found, as the README says" bash -c "grep -q 'libkvq.so.0: cannot open shared object file' '$T/run.err' && grep -q 'libkvq.so.0: cannot open shared object' '$(dirname "$0")/../../README.md'"
fi
"${CC_:-cc}" "${EXTRA[@]}" "$T/prog.c" -o "$T/prog-rpath" $(pkg-config --cflags --libs kvq) \
    -Wl,-rpath,"$(pkg-config --variable=libdir kvq)" 2>"$T/cc.log"
check "linked with the README's -Wl,-rpath: runs without LD_LIBRARY_PATH" env -u LD_LIBRARY_PATH "$T/prog-rpath"
check "the README gives LD_LIBRARY_PATH, ldconfig and -Wl,-rpath" bash -c "r='$(dirname "$0")/../../README.md'; grep -q 'LD_LIBRARY_PATH=\$(pkg-config --variable=libdir kvq)' \"\$r\" && grep -q ldconfig \"\$r\" && grep -q -- '-Wl,-rpath,\$(pkg-config --variable=libdir kvq)' \"\$r\""
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
