#!/usr/bin/env python3
"""Lists the object files of a build whose translation unit includes no
LibTorch header, for scripts/thread-check.sh --clang.

clang (14 and 16 alike) cannot compile Debian's LibTorch headers in C++20
mode against libstdc++ 12 (`std::vector<c10::IValue>` with an incomplete
`IValue`), so the clang build checks every other unit; what it leaves out
is printed to stderr. A unit includes LibTorch if its source, or a project
header it reaches through quoted includes, includes <torch/...> (the
project's headers say so at their top; the small <ATen/Parallel.h>, which
clang compiles, does not count).

Usage: clang-objects.py BUILD_DIR   (reads `ninja -t compdb` of BUILD_DIR)
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUOTED = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
TORCH = re.compile(r'^\s*#\s*include\s+<torch/', re.M)


def reaches_torch(path, memo, stack=()):
    if path in memo:
        return memo[path]
    if path in stack or not os.path.exists(path):
        return False
    text = open(path, encoding="utf-8", errors="replace").read()
    found = bool(TORCH.search(text))
    for inc in QUOTED.findall(text):
        if found:
            break
        for base in (ROOT, os.path.dirname(path)):
            candidate = os.path.join(base, inc)
            if os.path.exists(candidate):
                found = reaches_torch(os.path.normpath(candidate), memo, stack + (path,))
                break
    memo[path] = found
    return found


def main():
    build = sys.argv[1]
    db = json.loads(subprocess.run(["ninja", "-C", build, "-t", "compdb"], capture_output=True, text=True,
                                   check=True).stdout)
    memo = {}
    for e in db:
        command = e.get("command", "")
        if " -c " not in command or not e["file"].endswith((".cc", ".cxx", ".cpp")):
            continue
        source = e["file"] if os.path.isabs(e["file"]) else os.path.join(e["directory"], e["file"])
        if reaches_torch(os.path.normpath(source), memo):
            print(f"clang-objects: left out (LibTorch): {e['output']}", file=sys.stderr)
        else:
            print(e["output"])


if __name__ == "__main__":
    main()
