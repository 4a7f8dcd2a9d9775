"""The package installs offline with pip, and finds an installed kvq without KVQ_LIBRARY."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import SRC

CODE = ("import kvq, sys\n"
        "with kvq.Database(sys.argv[1]) as db:\n"
        "    q = db.create_queue('jobs'); q.push('installed'); print(q.pop().decode())\n"
        "print(kvq.__file__); print(kvq.library_path())\n")


def _env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "KVQ_LIBRARY", "LD_LIBRARY_PATH")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def test_pip_install_offline_and_installed_library(tmp_path):
    lib = os.environ.get("KVQ_LIBRARY")
    if not lib:
        pytest.fail("KVQ_LIBRARY must name the build's libkvq.so (ctest sets it)")
    build = os.path.dirname(os.path.abspath(lib))
    # pip, offline, without build isolation (Debian's pip and setuptools), from a copy so
    # that setuptools' build files stay out of the source tree
    src = tmp_path / "src"
    shutil.copytree(os.path.join(SRC, "python"), src)
    target = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index",
                        "--no-build-isolation", "--no-cache-dir", "--quiet", "--target",
                        str(target), str(src)], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (target / "kvq" / "__init__.py").exists() and (target / "kvq" / "py.typed").exists()
    # kvq installed with cmake into a prefix: found through the dynamic linker's search
    prefix = tmp_path / "prefix"
    # (without the ASan runtime a Sanitize build preloads into python: cmake is not built
    # with it)
    plain = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    p = subprocess.run(["cmake", "--install", build, "--prefix", str(prefix)], env=plain,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    libdirs = [str(d) for d in (prefix / "lib", prefix / "lib64",
                                prefix / "lib" / "x86_64-linux-gnu") if d.is_dir()]
    env = _env(PYTHONPATH=str(target), LD_LIBRARY_PATH=os.pathsep.join(libdirs))
    p = subprocess.run([sys.executable, "-c", CODE, str(tmp_path / "db")], env=env,
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    value, where, loaded = p.stdout.split("\n")[:3]
    assert value == "installed"
    assert where.startswith(str(target))
    assert loaded == "libkvq.so.0"
    # KVQ_LIBRARY, when set, wins over the installed one
    env["KVQ_LIBRARY"] = lib
    p = subprocess.run([sys.executable, "-c", CODE, str(tmp_path / "db2")], env=env,
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[2] == lib
