# Writes the two generated files of FoundationDB's Python binding into a copy of its `fdb`
# package: fdboptions.py (the option tables, from FoundationDB's fdbclient/vexillographer/
# fdb.options) and apiversion.py. Used by run_python.sh and run_fdb_suites.sh; FoundationDB's own
# build makes the same files with its vexillographer.
#
#   python3 gen_fdboptions.py FDB_SOURCE_TREE FDB_PACKAGE_DIR
import sys
import xml.etree.ElementTree as ET

src, out = sys.argv[1], sys.argv[2]
# One dict per scope: name -> (code, description, type, parameter description).
types = {None: "type(None)", "Int": "type(0)", "String": "type('')", "Bytes": "type(b'')"}
lines = []
for scope in ET.parse(src + "/fdbclient/vexillographer/fdb.options").getroot().findall("Scope"):
    lines.append("%s = {" % scope.get("name"))
    for o in scope.findall("Option"):
        if o.get("hidden") == "true":
            continue
        pd = o.get("paramDescription")
        lines.append("    %r : (%s, %r, %s, %r)," % (o.get("name"), o.get("code"),
                     o.get("description") or "", types[o.get("paramType")], pd))
    lines.append("}\n")
with open(out + "/fdboptions.py", "w") as f:
    f.write("\n".join(lines))
with open(out + "/apiversion.py", "w") as f:
    f.write('LATEST_API_VERSION = 730\nFDB_VERSION = "7.3"\n')
