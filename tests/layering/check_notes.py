#!/usr/bin/env python3
"""Checks the Notes: every `Note [Name]` cited is defined exactly once, and no name is split
across lines (grep must find every citation).

A Note is a named explanation in a comment, cited from elsewhere by its name (the style of
GHC and PyTorch: `Note [Stream-ordered reuse]`). Its definition is the comment line that starts
with it, outside tests/:

    // Note [Staged copies]: the H2D of a shard read from NVMe runs on ...
    # Note [Disk activity]
    ### Note [The prefetch scheduler]          (a heading in docs/*.md)

Every other occurrence is a citation, wherever it is: `(Note [Staged copies] in
param_fetcher.cpp)`. Tests cite, never define. Violations:
  - a cited Note defined nowhere, or defined more than once;
  - `Note [` with no closing `]` on the same line (a name broken over two lines).

Usage: check_notes.py ROOT   (exit 1 and one line per violation)
       check_notes.py --expect FILE ROOT   (exit 0 only when the violations found are exactly
           the FILE:LINE entries listed in FILE: the test of the checker itself)
"""
import os
import re
import sys

import checker_main

FOLDERS = ["core", "cpu_adam", "offload", "kernels", "runtime", "models", "infer", "train", "serve", "tools",
           "python", "scripts", "tests", "docs"]
SELF = "tests/layering"
EXTENSIONS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".py", ".sh", ".md", ".cmake", ".txt")
NOTE = re.compile(r"Note \[([^\]\n]*)\]")
OPEN = re.compile(r"Note \[[^\]]*$")
# A definition: the line's text starts with the Note (after a comment marker or a heading) and
# the name ends the line or is followed by ':' or '.'; "Note [X] (file.h)" or "Note [X] in
# file.cpp" at the start of a line is a citation.
DEFINITION = re.compile(r"^\s*(?://+|#+|\*)?\s*Note \[([^\]]+)\](?:[:.]|\s*$)")


def source_files(root):
    for folder in FOLDERS:
        top = os.path.join(root, folder)
        for dirpath, dirnames, files in os.walk(top):
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
            if rel_dir == SELF or rel_dir.startswith(SELF + "/"):
                dirnames[:] = []
                continue  # this checker and its planted fixture (checked with --expect)
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "build")))
            for name in sorted(files):
                if name.endswith(EXTENSIONS):
                    path = os.path.join(dirpath, name)
                    yield os.path.relpath(path, root).replace(os.sep, "/"), path


def check(root):
    definitions = {}  # name -> [where]
    citations = {}    # name -> first place cited
    problems = []
    for rel, path in source_files(root):
        is_test = rel.startswith("tests/")
        with open(path, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                if "Note [" not in line:
                    continue
                where = f"{rel}:{lineno}"
                if OPEN.search(line):
                    problems.append(f"{where}: a Note's name is split across lines (grep cannot "
                                    "find it): keep `Note [Name]` on one line")
                d = DEFINITION.match(line)
                for m in NOTE.finditer(line):
                    name = m.group(1)
                    if d and m.start() == d.start(1) - len("Note [") and not is_test:
                        definitions.setdefault(name, []).append(where)
                    else:
                        citations.setdefault(name, where)
    for name, places in sorted(definitions.items()):
        if len(places) > 1:
            for extra in places[1:]:
                problems.append(f"{extra}: Note [{name}] is defined again (first at {places[0]}): "
                                "define a Note once and cite it elsewhere")
    for name, where in sorted(citations.items()):
        if name not in definitions:
            problems.append(f"{where}: cites Note [{name}], which is defined nowhere: define it "
                            "(a comment line starting with it) or cite the right name")
    return problems, definitions, citations


def main():
    def ok_line(root):
        _, definitions, citations = check(root)
        return f"notes: ok ({len(definitions)} defined, {len(citations)} cited)"
    return checker_main.run(sys.argv, __doc__, "notes", lambda root: check(root)[0], ok_line)


if __name__ == "__main__":
    sys.exit(main())
