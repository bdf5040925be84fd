#!/usr/bin/env python3
"""Compares two tools/emit_all.sh outputs: each file byte-identical, or different
only in comments (kernel sources with every // comment removed, and the probe's
hash of the source text), or different in code. Prints the counts and the files
whose code differs; exits 1 if any does.

    tools/emit_compare.py BEFORE_DIR AFTER_DIR
"""
import json
import os
import re
import sys


def code(text):
    """Kernel source without its // comments (whole lines and trailing ones)."""
    return "\n".join(re.sub(r"\s*//.*$", "", line) for line in text.split("\n") if not re.match(r"\s*//", line))


def same_code(name, x, y):
    if name.endswith(".cu"):
        return code(x) == code(y)
    if name.endswith(".json"):
        jx, jy = json.loads(x), json.loads(y)
        jx["source"], jy["source"] = code(jx.get("source", "")), code(jy.get("source", ""))
        return jx == jy
    if name.endswith(".probe"):
        return re.sub(r"text=[0-9a-f]+", "text=*", x) == re.sub(r"text=[0-9a-f]+", "text=*", y)
    return False


def main(before, after):
    names_b, names_a = sorted(os.listdir(before)), sorted(os.listdir(after))
    if names_b != names_a:
        print("the two folders hold different files:", sorted(set(names_b) ^ set(names_a))[:20])
        return 1
    identical, comments, differ = 0, 0, []
    for name in names_b:
        with open(os.path.join(before, name)) as f:
            x = f.read()
        with open(os.path.join(after, name)) as f:
            y = f.read()
        if x == y:
            identical += 1
        elif same_code(name, x, y):
            comments += 1
        else:
            differ.append(name)
    print(f"{len(names_b)} files: {identical} byte-identical, {comments} differ in comments only, "
          f"{len(differ)} differ in code")
    for name in differ:
        print("  code differs:", name)
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
