#!/usr/bin/env bash
# Checks that the repository's documentation and comments stand on their own:
#
#  (a) references: no citation of a file outside the repository (../shared/...,
#      "DESIGN §N" or DESIGN.md instead of docs/design.md, PEERS.md, STYLE.md,
#      METHOD.md, HOPPER.md); every relative markdown link in README.md and docs/
#      resolves to a file or folder; every repository path with an extension that
#      README.md, docs/ or a code comment names (docs/..., tools/..., src/...) exists.
#  (b) work history: no "session N", "issue N" or experiment tags ("w24", "v6",
#      "w26 (kept)") in README.md, docs/ (docs/runs/ aside: raw run logs named by
#      date and GPU), include/, src/, templates/, tools/, python/, tests/.
#      The product speaks of the project, not of how it was made (docs/style.md,
#      rule 13); history lives in git and in the per-page "tried and rejected" lists.
#
# Experiment tags are looked for only where they cannot be code: in markdown prose,
# and in comments of code files (// and /* */ lines of C, C++, CUDA and templates;
# # in Python, shell and CMake). Code identifiers such as Philox's words w0..w3, SSA
# values v0, v1 or a `v2` flag are therefore not hits. A legitimate hit left over
# goes into tools/check_repo_docs.allow as "PATH:REGEX" (PATH a file, a folder or *;
# the regex is searched in
# "WHAT: TEXT" of the hit, so it can name the kind of hit), with a comment saying why.
# Text in `backticks` is code, not an experiment tag. This script and its allow list
# are not checked (they spell the patterns).
#
# Usage: tools/check_repo_docs.sh [--refs-only | --history-only] [PATH...]
# Prints FILE:LINE: WHAT: TEXT for each hit and exits 1 if there is any, else 0.
# With PATHs, checks only those files or folders (the default is the list above).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

mode=all
paths=()
for arg in "$@"; do
  case "$arg" in
    --refs-only) mode=refs ;;
    --history-only) mode=history ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "check_repo_docs.sh: unknown option $arg" >&2; exit 2 ;;
    *) paths+=("$arg") ;;
  esac
done
if [ ${#paths[@]} -eq 0 ]; then
  paths=(README.md docs include src templates tools python tests)
fi

exec python3 - "$mode" "${paths[@]}" <<'PY'
import os
import re
import sys

mode = sys.argv[1]
roots = sys.argv[2:]

ALLOW_FILE = "tools/check_repo_docs.allow"
CODE_EXT = {".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".cuh", ".in"}
HASH_EXT = {".py", ".sh", ".cmake", ".txt", ".toml", ".cfg"}
SKIP_DIRS = {".git", "build", "__pycache__", ".venv"}
SKIP_EXT = {".png", ".jpg", ".npy", ".json", ".jsonl", ".patch", ".diff", ".bin", ".cubin"}

# (a) files that are not in the repository.
OUTSIDE = [
    (re.compile(r"\.\./shared/|/work/shared\b"), "outside the repository"),
    (re.compile(r"(?<![/\w])DESIGN(\.md)?\b"), "cites DESIGN (use docs/design.md)"),
    (re.compile(r"\bPEERS(\.md)?\b"), "cites PEERS (use docs/perf/peers.md)"),
    (re.compile(r"\bSTYLE\.md\b|\bSTYLE (rule|§)"), "cites STYLE.md (use docs/style.md)"),
    (re.compile(r"\bMETHOD(\.md)?\b"), "cites METHOD (not in the repository)"),
    (re.compile(r"\bHOPPER\.md\b"), "cites HOPPER.md (use docs/hopper.md)"),
]
# Repository paths named in prose or comments: docs/x.md, tools/perf/y.sh, ...
PATH_MENTION = re.compile(
    r"(?<![\w./-])((?:docs|tools|examples|templates|include|src|tests|python|cmake)/"
    r"[\w./+-]*\w\.(?:md|txt|png|json|jsonl|patch|diff|sh|py|cpp|hpp|h|cu|cuh|in|cmake))\b")
MD_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")

# (b) words of work history.
HISTORY_ANYWHERE = [
    (re.compile(r"\b[Ss]essions? \d+\b|\b[Ss]essions? [0-9]+-[0-9]+\b"), "work history (session N)"),
    (re.compile(r"\b[Ii]ssues? #?\d+\b|\b[Ii]ssue #\d+"), "work history (issue N)"),
]
# Experiment tags: w1..w99 with an optional letter suffix ("w10nc"), v1..v99 with an
# optional .N ("v6.1"), "wgmma v5". Not a JSON or record format version ("JSON v1",
# "schema version 1", "v1/kernels/").
TAG = re.compile(r"(?<![\w./-])(w\d{1,2}[a-z]{0,2}|v\d{1,2}(?:\.\d)?)(?![\w/])")
TAG_OK_BEFORE = re.compile(r"(JSON|json|format|schema|record|folder|npy|\.npy|NumPy|version|CUDA|ROCm|PTX|sm_)\s*$")


def load_allow():
    rules = []
    if os.path.exists(ALLOW_FILE):
        with open(ALLOW_FILE, encoding="utf-8") as f:
            for raw in f:
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                path, _, rx = line.partition(":")
                rules.append((path, re.compile(rx)))
    return rules


ALLOW = load_allow()


def allowed(path, text):
    return any((p in ("*", path) or path.startswith(p.rstrip("/") + "/")) and rx.search(text) for p, rx in ALLOW)


SELF = {"tools/check_repo_docs.sh", ALLOW_FILE}
BACKTICKS = re.compile(r"`[^`]*`")


def files():
    for r in roots:
        if os.path.isfile(r):
            yield r
            continue
        for d, dirs, fs in os.walk(r):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
            rel = os.path.relpath(d, ".")
            if rel == "docs/runs" or rel.startswith("docs/runs/"):
                dirs[:] = []
                continue
            for name in sorted(fs):
                if os.path.splitext(name)[1] in SKIP_EXT:
                    continue
                p = os.path.normpath(os.path.join(d, name))
                if p not in SELF:
                    yield p


def kind_of(path):
    ext = os.path.splitext(path)[1]
    if ext == ".md":
        return "md"
    if ext in CODE_EXT:
        return "c"
    if ext in HASH_EXT or os.path.basename(path) in ("CMakeLists.txt",):
        return "hash"
    return "other"


def comment_text(kind, line, state):
    """The comment part of a code line; state["block"] tracks /* ... */."""
    if kind == "md":
        return line
    if kind == "hash":
        stripped = line.lstrip()
        if stripped.startswith("#!"):
            return ""
        i = line.find("#")
        return line[i:] if i >= 0 else ""
    if kind == "c":
        out = []
        rest = line
        if state.get("block"):
            end = rest.find("*/")
            if end < 0:
                return rest
            out.append(rest[:end])
            rest = rest[end + 2:]
            state["block"] = False
        i = rest.find("//")
        j = rest.find("/*")
        if i >= 0 and (j < 0 or i < j):
            out.append(rest[i:])
        elif j >= 0:
            end = rest.find("*/", j + 2)
            if end < 0:
                state["block"] = True
                out.append(rest[j:])
            else:
                out.append(rest[j:end])
        return " ".join(out)
    return ""


hits = []


def hit(path, n, what, text):
    if not allowed(path, f"{what}: {text}"):
        hits.append(f"{path}:{n}: {what}: {text.strip()[:160]}")


def check_file(path):
    kind = kind_of(path)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (UnicodeDecodeError, OSError):
        return
    in_docs = kind == "md" and (path == "README.md" or path.startswith("docs/"))
    state = {}
    fence = False
    for n, line in enumerate(lines, 1):
        if kind == "md" and line.lstrip().startswith("```"):
            fence = not fence
        prose = comment_text(kind, line, state)
        if mode in ("all", "refs"):
            for rx, what in OUTSIDE:
                if rx.search(line):
                    hit(path, n, what, line)
            if in_docs:
                for m in MD_LINK.finditer(line):
                    target = m.group(1)
                    if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                        continue
                    target = target.split("#", 1)[0]
                    if not target:
                        continue
                    resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
                    if not os.path.exists(resolved):
                        hit(path, n, f"broken link ({target})", line)
            scan = MD_LINK.sub(" ", line) if kind == "md" else prose  # links checked above
            for m in PATH_MENTION.finditer(scan):
                p = m.group(1).rstrip(".")
                if not os.path.exists(p):
                    hit(path, n, f"names a missing path ({p})", line)
        if mode in ("all", "history"):
            for rx, what in HISTORY_ANYWHERE:
                if rx.search(line):
                    hit(path, n, what, line)
                    break
            text = prose if kind != "md" else line
            if kind == "md" and fence:
                text = ""  # code blocks in markdown: commands and output, not prose
            text = BACKTICKS.sub(" ", text)
            for m in TAG.finditer(text):
                if TAG_OK_BEFORE.search(text[:m.start()]):
                    continue
                hit(path, n, f"experiment tag ({m.group(1)})", line)
                break


for p in files():
    check_file(p)

for h in hits:
    print(h)
if hits:
    print(f"check_repo_docs: {len(hits)} problem(s); see the header of tools/check_repo_docs.sh", file=sys.stderr)
    sys.exit(1)
print("check_repo_docs: ok", file=sys.stderr)
PY
