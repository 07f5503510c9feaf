"""The command line both tree checkers share (check_layers.py, check_notes.py):

    CHECKER ROOT                  exit 1 and one line per violation when any is found
    CHECKER --expect FILE ROOT    exit 0 only when the violations found are exactly the
                                  FILE:LINE entries listed in FILE (the test of the checker)
"""


def read_expected(path):
    with open(path, encoding="utf-8") as f:
        return {line.strip() for line in f if line.strip() and not line.startswith("#")}


def run(argv, doc, name, check, ok_line):
    """check(root) -> list of "FILE:LINE: message"; ok_line(root) -> the line printed when none."""
    args = argv[1:]
    expect = None
    if len(args) == 3 and args[0] == "--expect":
        expect, args = args[1], args[2:]
    if len(args) != 1:
        print(doc)
        return 2
    problems = check(args[0])
    for p in problems:
        print(p)
    if expect is not None:
        found = {p.split(": ", 1)[0] for p in problems}
        wanted = read_expected(expect)
        for missed in sorted(wanted - found):
            print(f"NOT CAUGHT: {missed} (planted in the fixture, not reported)")
        for extra in sorted(found - wanted):
            print(f"UNEXPECTED: {extra} (reported, but not a planted violation)")
        ok = found == wanted
        print(f"{name} checker: {'catches exactly' if ok else 'does not catch exactly'} the "
              f"{len(wanted)} planted violations")
        return 0 if ok else 1
    if problems:
        print(f"{len(problems)} {name} violation(s)")
        return 1
    print(ok_line(args[0]))
    return 0
