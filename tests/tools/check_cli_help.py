#!/usr/bin/env python3
"""The README's command table against each command's --help, and the command line's errors.

1. Every row of README.md's "## Commands" table names a command (`strata train`, `strata bench
   step`, ...) whose --help lists exactly the flags the row's command cell shows (--help and
   --version aside), and a ZeRO stage range ("stages 0-3") in the help is the one the row says.
   Every command and bench has a row.
2. An unknown flag is named with the nearest known one (`train --step 3`: "did you mean --steps"),
   before any complaint about required flags; an unknown command likewise (`strata trian`,
   `strata bench stpe`); both exit non-zero.
3. `strata --version` and `strata version` print the version, the commit and the CUDA line.

Usage: check_cli_help.py STRATA README.md
"""
import re
import subprocess
import sys

from bench_check_util import fail

FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
RANGE = re.compile(r"stages? (\d) ?[-–] ?(\d)")


def run(strata, *args):
    return subprocess.run([strata, *args], capture_output=True, text=True, timeout=30)


def help_flags(text):
    """The flags of a CLI11 help text: the first column of its option lines."""
    flags = set()
    for line in text.splitlines():
        m = re.match(r"^\s+(-\S.*?)(\s{2,}|$)", line)
        if m:
            flags.update(FLAG.findall(m.group(1)))
    return flags - {"--help", "--version"}


def subcommands(text):
    """The subcommand names of a CLI11 help text (its Subcommands: section)."""
    names, inside = [], False
    for line in text.splitlines():
        if line.strip() == "Subcommands:":
            inside = True
            continue
        if inside:
            m = re.match(r"^\s+([a-z][a-z-]*)\s", line)
            if m:
                names.append(m.group(1))
            elif line.strip() and not line.startswith(" "):
                inside = False
    return names


def readme_rows(readme):
    with open(readme) as f:
        text = f.read()
    section = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `strata "):
            continue
        cells = [c for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows.append((cells[0].strip(), cells[1].strip() if len(cells) > 1 else ""))
    return rows


def main():
    strata, readme = sys.argv[1], sys.argv[2]
    top = run(strata, "--help")
    commands = [c for c in subcommands(top.stdout) if c not in ("version",)]
    bench = [b for b in subcommands(run(strata, "bench", "--help").stdout)]
    if "train" not in commands or "step" not in bench:
        fail(f"the commands {commands} and benches {bench} were not read from --help", top)
    wanted = {("bench", b) if b else None for b in bench} | {(c,) for c in commands if c != "bench"}
    problems, seen = [], set()
    for command_cell, what in readme_rows(readme):
        words = []
        for w in re.sub(r"[`\\]", " ", command_cell).split()[1:]:
            if not re.fullmatch(r"[a-z]+", w):
                break
            words.append(w)
        if not words:
            continue
        key = tuple(words[:2]) if words[0] == "bench" else (words[0],)
        seen.add(key)
        h = run(strata, *key, "--help")
        if h.returncode != 0:
            problems.append(f"`strata {' '.join(key)} --help` exited {h.returncode}")
            continue
        have, documented = help_flags(h.stdout), set(FLAG.findall(command_cell))
        for flag in sorted(documented - have):
            problems.append(f"README's `strata {' '.join(key)}` shows {flag}, which its --help does not know")
        for flag in sorted(have - documented):
            problems.append(f"`strata {' '.join(key)} --help` has {flag}, which README's row does not show")
        for r in set(RANGE.findall(h.stdout)):
            if f"{r[0]}-{r[1]}" not in (command_cell + what).replace("–", "-").replace(" - ", "-"):
                problems.append(f"`strata {' '.join(key)} --help` says stages {r[0]}-{r[1]}; README's row does not")
    for key in sorted(wanted - seen - {None}):
        problems.append(f"README's command table has no row for `strata {' '.join(key)}`")
    if problems:
        fail("the README and --help disagree:\n  " + "\n  ".join(problems))

    # 2. Unknown flags and commands.
    for args, want in ((["train", "--step", "3"], "unknown flag --step (did you mean --steps"),
                       (["trian"], "unknown command `strata trian` (did you mean train"),
                       (["bench", "stpe"], "unknown command `strata bench stpe` (did you mean step"),
                       (["infer", "--max-new-token=5"], "unknown flag --max-new-token (did you mean --max-new-tokens")):
        r = run(strata, *args)
        if r.returncode == 0 or want not in r.stderr or "required" in r.stderr:
            fail(f"`strata {' '.join(args)}`: wanted {want!r} and a non-zero exit", r)

    # 3. The version.
    for args in (["--version"], ["version"]):
        r = run(strata, *args)
        lines = r.stdout.splitlines()
        if r.returncode != 0 or len(lines) != 3 or not re.fullmatch(r"strata \d+\.\d+\.\d+", lines[0]) \
                or not re.fullmatch(r"commit ([0-9a-f]{12}(-dirty)?|unknown)", lines[1]) \
                or not re.fullmatch(r"CUDA: (compiled in \(architectures .+\)|not compiled in)", lines[2]):
            fail(f"`strata {' '.join(args)}` printed {r.stdout!r}", r)
    print(f"ok: {len(seen)} commands' --help match README.md; unknown flags and commands named; version")


if __name__ == "__main__":
    main()
