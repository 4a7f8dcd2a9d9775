#!/usr/bin/env python3
"""The public API's naming scheme (docs/api.md), checked over include/kvq/*.h.

    api_scheme.py [INCLUDE_DIR]

Every function declared KVQ_API must:
  1. be named kvq_<object>_<verb or noun> for one of the objects below, or be one of the few
     functions of the library as a whole (GLOBALS);
  2. carry KVQ_NODISCARD unless it returns void;
  3. as a getter (its only parameter a const pointer to the object, a value returned) be
     named kvq_<object>_get_<noun>;
  4. return bool when it is a predicate (PREDICATES), and no other int-returning function
     may be a predicate by its name (..._finished, ..._contains, ..._equal, kvq_error_...);
  5. take its outputs first: a parameter named out or outs is the first one;
  6. take a caller buffer as (out, size_t cap, size_t *len, ...);
  7. say "stats", never "metrics";
  8. give a yes-or-no output as bool *, never int * (an int * named as one, FLAG_NAMES, is
     refused unless INT_FLAGS lists it).
Before the headers, the checker runs itself over declarations that break each rule and fails
unless it rejects every one of them (a checker that cannot fail checks nothing).
Exit status 0 when everything holds; 1 with one line per breach otherwise.
"""
import os
import re
import sys

OBJECTS = (
    "buf", "bytes", "db", "txn", "watch", "queue", "workq", "consumer", "tuple", "subspace",
    "error", "testing",
)
GLOBALS = {"kvq_version", "kvq_strerror", "kvq_errname", "kvq_last_error",
           "kvq_last_error_code"}
PREDICATE_NAME = re.compile(r"_(finished|contains|equal)$|^kvq_error_")
DECL = re.compile(r"^KVQ_API\b(.*?);", re.M | re.S)
# Output names that say yes or no.
FLAG_NAMES = {"more", "present", "enqueued", "already", "found", "exists", "done"}
# The one int * yes-or-no left (docs/api.md): the embedded engine calls kvq_txn_get with an int
# and is rewritten this round; present becomes a bool * with it.
INT_FLAGS = {("kvq_txn_get", "present")}


def split_params(params):
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return [] if out == ["void"] else out


def param_name(p):
    m = re.search(r"(\w+)\s*(\[[^\]]*\])?$", p)
    return m.group(1) if m else ""


def parse(text):
    """Yields (decl, nodiscard, return type, name, [params]) for each KVQ_API function."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    for m in DECL.finditer(text):
        body = " ".join(m.group(1).split())
        if "(" not in body:
            continue
        nodiscard = body.startswith("KVQ_NODISCARD ")
        if nodiscard:
            body = body[len("KVQ_NODISCARD "):]
        fm = re.match(r"(.*?)\b(kvq_\w+)\s*\((.*)\)$", body)
        if fm is None:
            yield body, nodiscard, "", "", []
            continue
        yield body, nodiscard, fm.group(1).strip(), fm.group(2), split_params(fm.group(3))


def check(text, where):
    errors = []

    def bad(name, why):
        errors.append(f"{where}: {name}: {why}")

    for body, nodiscard, ret, name, params in parse(text):
        if not name:
            bad(body, "not a declaration this checker can read")
            continue
        if "metrics" in name:
            bad(name, 'say "stats", not "metrics"')
        objs = sorted((o for o in OBJECTS if name.startswith(f"kvq_{o}_")), key=len)
        if name not in GLOBALS and not objs:
            bad(name, "not kvq_<object>_<verb>: the objects are " + ", ".join(OBJECTS))
        if ret != "void" and not nodiscard:
            bad(name, "returns a value but has no KVQ_NODISCARD")
        if ret == "void" and nodiscard:
            bad(name, "KVQ_NODISCARD on a void function")
        if PREDICATE_NAME.search(name) and ret != "bool":
            bad(name, f"a predicate returning {ret}, not bool")
        if ret == "bool" and not PREDICATE_NAME.search(name):
            bad(name, "returns bool but is not named as a predicate (add it to PREDICATE_NAME)")
        if (len(params) == 1 and params[0].startswith("const kvq_") and ret not in ("void", "int")
                and objs):
            obj = objs[-1]
            if not name.startswith(f"kvq_{obj}_get_"):
                bad(name, f"a getter: name it kvq_{obj}_get_<noun>")
        names = [param_name(p) for p in params]
        for i, n in enumerate(names):
            if n in ("out", "outs") and i != 0:
                bad(name, f"the output '{n}' is parameter {i + 1}, not the first")
        for p, n in zip(params, names):
            if n in FLAG_NAMES and re.match(r"int\s*\*", p) and (name, n) not in INT_FLAGS:
                bad(name, f"the yes-or-no output '{n}' is an int *, not a bool *")
        if "cap" in names:
            i = names.index("cap")
            if i != 1 or names[0] != "out" or len(names) < 3 or names[2] != "len" \
                    or not re.match(r"size_t\s*\*", params[2]):
                bad(name, "a caller buffer is (out, size_t cap, size_t *len, ...)")
    return errors


SELF_TEST = {
    "no prefix": "KVQ_API KVQ_NODISCARD int kvq_strinc(kvq_buf *out, const uint8_t *k);",
    "no nodiscard": "KVQ_API int kvq_buf_grow(kvq_buf *buf, size_t extra);",
    "nodiscard on void": "KVQ_API KVQ_NODISCARD void kvq_db_close(kvq_db *db);",
    "getter form": "KVQ_API KVQ_NODISCARD const char *kvq_db_engine(const kvq_db *db);",
    "int predicate": "KVQ_API KVQ_NODISCARD int kvq_error_retryable(int err);",
    "output last": "KVQ_API KVQ_NODISCARD int kvq_queue_len(kvq_queue *q, uint64_t *out);",
    "buffer form": "KVQ_API KVQ_NODISCARD int kvq_tuple_pack(uint8_t *buf, size_t cap, "
                   "size_t *len_out, const kvq_tuple_elem *e, size_t n);",
    "buffer without len": "KVQ_API KVQ_NODISCARD int kvq_workq_lease_format(char *out, "
                          "size_t cap, const kvq_workq_lease *lease);",
    "metrics": "KVQ_API KVQ_NODISCARD int kvq_workq_get_metrics(kvq_workq_stats *out, "
               "kvq_workq *w);",
    "int flag": "KVQ_API KVQ_NODISCARD int kvq_txn_get_range(const kvq_kv **out, size_t *count, "
                "int *more, kvq_txn *txn);",
}
GOOD = """
KVQ_API void kvq_db_close(kvq_db *db);
KVQ_API KVQ_NODISCARD const char *kvq_db_get_engine(const kvq_db *db);
KVQ_API KVQ_NODISCARD bool kvq_error_retryable(int err);
KVQ_API KVQ_NODISCARD int kvq_tuple_pack(
    uint8_t *out, size_t cap, size_t *len, const kvq_tuple_elem *elems, size_t count);
KVQ_API KVQ_NODISCARD int kvq_txn_get_range(const kvq_kv **out, size_t *count, bool *more,
    kvq_txn *txn);
"""


def self_test():
    failures = []
    for what, decl in SELF_TEST.items():
        if not check(decl, "self-test"):
            failures.append(f"self-test: the checker accepts a breach ({what}): {decl}")
    for e in check(GOOD, "self-test"):
        failures.append(f"self-test: the checker rejects a good declaration: {e}")
    return failures


def main():
    inc = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "kvq")
    errors = self_test()
    count = 0
    for fn in sorted(os.listdir(inc)):
        if fn.endswith(".h"):
            with open(os.path.join(inc, fn), encoding="utf-8") as f:
                text = f.read()
            count += sum(1 for _ in parse(text))
            errors += check(text, fn)
    if count < 100:
        errors.append(f"only {count} KVQ_API functions found in {inc}: is the parser broken?")
    for e in errors:
        print(e)
    if not errors:
        print(f"api_scheme: {count} public functions follow the scheme (docs/api.md)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
