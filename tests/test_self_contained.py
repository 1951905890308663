"""Nothing in the repository refers to files outside it (documents of a
workspace the repository is not part of)."""
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Spelled in pieces so that this file does not match itself.
OUTSIDE = re.compile("|".join(re.escape(a + b) for a, b in (
    ("BENCHMARKS", ".md"), ("ARCHITECTURE", ".md"), ("../", "shared/"), ("/work/", "shared"))))


def tracked_text_files():
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    for name in out.splitlines():
        path = ROOT / name
        if path.suffix in {".py", ".md", ".txt", ".toml", ".sh", ".cfg", ".rst", ".cu", ".cuh",
                           ".h", ".cpp"} or name in {".ci/run", "CMakeLists.txt"}:
            yield name, path


def test_no_reference_outside_the_repository():
    offenders = []
    for name, path in tracked_text_files():
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert not offenders, "references to files outside the repository:\n" + "\n".join(offenders)
