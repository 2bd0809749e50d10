#!/usr/bin/env python3
"""Fails when a source file includes a header of a higher layer.

A folder may include only itself and lower layers:
  common < proto < config < compression < transport < cluster < wan
         < {server, coordinator, worker} < aggregator < deploy < bench < cli
server, coordinator and worker are one layer of three siblings: none
includes another (a shard, the coordinator and a worker share only what
lies below them).
("proto" is the generated "proto/*.pb.h"). Includes of anything else
(system headers, "x.h" without a folder, third-party folders) are not checked.

Usage: check-layers.py [--root DIR]   check the tree at DIR (default: the repository)
       check-layers.py --self-test    prove the check fails on a bad include
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ORDER = [["common"], ["proto"], ["config"], ["compression"], ["transport"], ["cluster"], ["wan"],
         ["server", "coordinator", "worker"], ["aggregator"],
         ["deploy"], ["bench"], ["cli"]]
LAYERS = [name for group in ORDER for name in group]
RANK = {name: i for i, group in enumerate(ORDER) for name in group}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/[^"]*"')
SOURCES = (".cc", ".h", ".cpp", ".hpp", ".proto")


def violations(root):
    """Yields 'file:line: includes "x" (layer a < layer b)' for each upward include."""
    for layer in LAYERS:
        top = os.path.join(root, layer)
        for dirpath, _, files in sorted(os.walk(top)):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) in RANK and m.group(1) != layer and RANK[m.group(1)] >= RANK[layer]:
                            rel = os.path.relpath(path, root)
                            header = line.split('"')[1]
                            yield f'{rel}:{number}: includes "{header}" ({layer} may not include {m.group(1)})'


def check(root):
    bad = list(violations(root))
    for v in bad:
        print(v)
    if bad:
        print(f"check-layers: {len(bad)} include(s) of a higher layer; order: {' < '.join('{' + ', '.join(g) + '}' if len(g) > 1 else g[0] for g in ORDER)}")
    return 1 if bad else 0


def self_test():
    """The check passes on a tree that includes downward and fails on one upward include."""
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)

        write("server/server.h", '#include "common/status.h"\n#include "proto/geodesic.pb.h"\n#include <vector>\n')
        write("cli/main.cc", '#include "server/server.h"\n#include "bench/bench.h"\n')
        run = [sys.executable, os.path.abspath(__file__), "--root", root]
        good = subprocess.run(run, capture_output=True, text=True)
        write("common/log.cc", '#include "common/log.h"\n#include "worker/trainer.h"\n')
        bad = subprocess.run(run, capture_output=True, text=True)
        write("common/log.cc", '#include "common/log.h"\n')
        write("worker/worker.cc", '#include "server/server.h"\n')
        sibling = subprocess.run(run, capture_output=True, text=True)
    if good.returncode != 0:
        print("check-layers self-test: a clean tree failed:\n" + good.stdout)
        return 1
    if bad.returncode == 0 or 'common/log.cc:2: includes "worker/trainer.h"' not in bad.stdout:
        print("check-layers self-test: common including worker was not reported:\n" + bad.stdout)
        return 1
    if sibling.returncode == 0 or 'worker/worker.cc:1: includes "server/server.h"' not in sibling.stdout:
        print("check-layers self-test: worker including server was not reported:\n" + sibling.stdout)
        return 1
    print("check-layers self-test: ok")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    return self_test() if args.self_test else check(args.root)


if __name__ == "__main__":
    sys.exit(main())
