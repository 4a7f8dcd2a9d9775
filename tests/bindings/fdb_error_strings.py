# Compares fdb_get_error of the libfdb_c.so found on the library path with FoundationDB's error
# table (flow/include/flow/error_definitions.h of a FoundationDB source tree): the message of
# every code, byte for byte, and FoundationDB's answers for codes that name no error
# ("UNKNOWN_ERROR" within 0..30000, unknown_error's message outside). run_fdb_suites.sh runs it.
#
#   python3 fdb_error_strings.py FDB_SOURCE_TREE
import ast
import ctypes
import re
import sys

lib = ctypes.CDLL("libfdb_c.so")
lib.fdb_get_error.restype = ctypes.c_char_p
lib.fdb_get_error.argtypes = [ctypes.c_int]
path = sys.argv[1] + "/flow/include/flow/error_definitions.h"
table = {}
for name, code, text in re.findall(r'^ERROR\(\s*(\w+)\s*,\s*(\d+)\s*,\s*("(?:[^"\\]|\\.)*")\s*\)',
                                   open(path).read(), re.M):
    table[int(code)] = ast.literal_eval(text).encode()  # the C literal's escapes are Python's
checks = dict(table)
unknown = table[4000]
for code in (2, 999, 5000, 9001, 9003, 30000):
    if code not in table:
        checks[code] = b"UNKNOWN_ERROR"
for code in (-1, -2000, 30001, 2**31 - 1):
    checks[code] = unknown
bad = [(c, want, lib.fdb_get_error(c)) for c, want in sorted(checks.items())
       if lib.fdb_get_error(c) != want]
for c, want, got in bad[:20]:
    print("error %d: FoundationDB says %r, libfdb_c.so says %r" % (c, want, got))
print("error strings: %d codes of FoundationDB's table, %d others, %d differ"
      % (len(table), len(checks) - len(table), len(bad)))
sys.exit(1 if bad else 0)
