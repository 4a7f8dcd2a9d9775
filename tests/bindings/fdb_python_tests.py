# Runs the tests of FoundationDB's Python binding (bindings/python/tests: unit_tests.py and the
# modules it imports; not tuple_tests.py, which is Python 2 code (unichr) and touches no
# database: the bindingtester's tuple test covers the tuple layer) against a kvq directory through libkvq_fdb_c.so, each test
# function on its own so that one failure does not hide the others (unit_tests.py's own main
# stops at the first). run_fdb_suites.sh sets it up; not part of ctest.
#
#   FDB_PYTHON_DIR=<binding copy> python3 fdb_python_tests.py API_VERSION CLUSTER_FILE
#
# Prints one line per test: PASS, FAIL, or KNOWN (a documented difference, docs/fdb.md: the test
# failed with exactly the error kvq documents). Exits 1 if any test FAILs.
import os
import sys
import traceback

sys.path[:0] = [os.environ["FDB_PYTHON_DIR"], os.path.join(os.environ["FDB_PYTHON_DIR"], "tests")]
import fdb  # noqa: E402

fdb.api_version(int(sys.argv[1]))
import cancellation_timeout_tests as ct  # noqa: E402
import size_limit_tests as sl  # noqa: E402
import tenant_tests as tt  # noqa: E402
import unit_tests as ut  # noqa: E402

db = fdb.open(sys.argv[2])

# Tests kvq cannot pass, with the one error each is documented to fail with.
known = {
    "test_get_client_status": 2108,  # unsupported_operation: no client status document
    "test_tenants": 2136,  # tenants_disabled: a kvq directory has no tenants
}

# unit_tests.run_unit_tests's list, in its order.
tests = [
    ("test_db_options", lambda: ut.test_db_options(db)),
    ("test_options", lambda: ut.test_options(db)),
    ("test_watches", lambda: ut.test_watches(db)),
    ("test_cancellation", lambda: ct.test_cancellation(db)),
    ("test_retry_limits", lambda: ct.test_retry_limits(db)),
    ("test_db_retry_limits", lambda: ct.test_db_retry_limits(db)),
    ("test_timeouts", lambda: ct.test_timeouts(db)),
    ("test_db_timeouts", lambda: ct.test_db_timeouts(db)),
    ("test_combinations", lambda: ct.test_combinations(db)),
    ("test_locality", lambda: ut.test_locality(db)),
    ("test_predicates", lambda: ut.test_predicates()),
    ("test_size_limit_option", lambda: sl.test_size_limit_option(db)),
    ("test_get_approximate_size", lambda: sl.test_get_approximate_size(db)),
    ("test_get_client_status", lambda: ut.test_get_client_status(db)),
]
if fdb.get_api_version() >= 710:
    tests.append(("test_tenants", lambda: tt.test_tenants(db)))

failed = 0
for name, run in tests:
    try:
        run()
        print("PASS  %s" % name, flush=True)
    except Exception as e:  # noqa: BLE001 (every failure is reported)
        code = getattr(e, "code", None)
        if name in known and code == known[name]:
            print("KNOWN %s: %s" % (name, e), flush=True)
        else:
            failed += 1
            print("FAIL  %s: %r" % (name, e), flush=True)
            traceback.print_exc()
sys.exit(1 if failed else 0)
