"""The README's Python example, taken from README.md itself and run as shown."""

import os
import re
import subprocess
import sys

from conftest import SRC, child_env


def test_readme_example(tmp_path):
    text = open(os.path.join(SRC, "README.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README.md has no ```python example"
    code = blocks[0]
    assert len(code.strip().splitlines()) <= 10
    script = tmp_path / "example.py"
    script.write_text(code)
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=child_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "job 0\njob 1\njob 2\n"
    # it made the directory the README says, which the kvq command reads too
    assert os.path.isdir(tmp_path / "kvq-data")
