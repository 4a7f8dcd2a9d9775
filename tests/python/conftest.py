"""Fixtures of the Python package's tests (tests/python, run by ctest with label python).

ctest sets KVQ_LIBRARY to the build's libkvq.so, KVQ_CLI to its kvq program and PYTHONPATH to
the source tree's python/ directory; run by hand:

    KVQ_LIBRARY=build/libkvq.so KVQ_CLI=build/kvq PYTHONPATH=python \
        python3 -m pytest -p no:cacheprovider tests/python
"""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "python"))

import kvq  # noqa: E402

STORAGES = ("log", "sqlite")


@pytest.fixture(params=STORAGES)
def storage(request):
    """Each test that takes it runs on both storages of the embedded engine: the default (the log
    store) and the older SQLite storage, kept for the databases made with it."""
    return request.param


@pytest.fixture
def url(tmp_path, storage):
    """A fresh database URL: a directory (the default storage) or sqlite:DIR (the SQLite
    storage)."""
    d = str(tmp_path / "db")
    return "sqlite:" + d if storage == "sqlite" else d


@pytest.fixture
def db(url):
    with kvq.Database(url) as d:
        yield d


def child_env():
    """The environment for a Python child process: the package and the library of this run."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(SRC, "python") + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_py(code, *args, check=True, **kw):
    """Runs python code in a child process with child_env(); returns the CompletedProcess."""
    p = subprocess.run([sys.executable, "-c", code, *args], env=kw.pop("env", child_env()),
                       capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"child failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


@pytest.fixture
def cli():
    """The kvq command of this build ($KVQ_CLI)."""
    path = os.environ.get("KVQ_CLI")
    if not path or not os.path.exists(path):
        pytest.fail("KVQ_CLI must name the build's kvq program (ctest sets it)")
    return path
