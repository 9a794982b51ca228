#!/usr/bin/env python3
"""Every `Note [Name]` reference that names a file points at the file that holds the note.

A note is defined once: a comment block of at least two lines, in a source file that is not a
test, that starts `// Note [Name]` (or `# Note [Name]`) followed by `:` or the end of the line.
(A one-line comment that starts the same way, or `Note [Name].`, is a reference.) A reference is any other `Note [Name]`; when it names a file (`Note [Name], path/file.h` or
`Note [Name] in path/file.h`), that file (a path from the project root, or a name in the
referring file's folder) must be the one defining the note. Every referenced note must exist.

Usage: check_notes.py PROJECT_ROOT   (exit 0: clean; 1: one line per broken reference)
"""

import os
import re
import subprocess
import sys

DEFINITION = re.compile(r"^\s*(?://|#)\s*Note \[([^\]]+)\](?::|\s*$)")
COMMENT = re.compile(r"^\s*(?://|#)")
REFERENCE = re.compile(r"Note \[([^\]]+)\](?:\s*(?:,|in|\(|of)\s*`?([\w./-]+\.(?:h|cc|cuh|md|cmake|py|proto|sh))`?)?")
SOURCES = (".h", ".cc", ".cuh", ".py", ".cmake", ".txt", ".md", ".proto", ".sh")


def files(root):
    out = subprocess.check_output(["git", "-C", root, "ls-files", "-co", "--exclude-standard"])
    return [f for f in out.decode().split("\n") if f.endswith(SOURCES) and
            os.path.exists(os.path.join(root, f))]


def is_test(path):
    name = os.path.basename(path)
    return name.endswith("_test.cc") or "_test_util." in name or name.endswith("_test.py")


def block_length(lines, start):
    """Consecutive comment lines from lines[start]."""
    n = 0
    while start + n < len(lines) and COMMENT.match(lines[start + n]):
        n += 1
    return n


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    paths = files(root)
    defined = {}
    candidates = {}
    problems = []
    texts = {}
    for path in paths:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            texts[path] = f.read().split("\n")
        if path.endswith(".md") or path.startswith("tests/layering/") or is_test(path):
            continue
        lines = texts[path]
        for number, line in enumerate(lines, 1):
            m = DEFINITION.match(line)
            length = block_length(lines, number - 1) if m else 0
            if length >= 2:
                candidates.setdefault(m.group(1), []).append((length, path, number))
    # The longest block defines the note; another long one (4+ lines) is a second definition.
    for name, found in candidates.items():
        found.sort(reverse=True)
        defined[name] = (found[0][1], found[0][2])
        for length, path, number in found[1:]:
            if length >= 4:
                problems.append(f"{path}:{number}: Note [{name}] is also defined in "
                                f"{found[0][1]}:{found[0][2]}")
    for path in paths:
        if path.startswith("tests/layering/"):
            continue
        for number, line in enumerate(texts[path], 1):
            if defined.get(DEFINITION.match(line).group(1) if DEFINITION.match(line) else None,
                           (None, None)) == (path, number):
                continue
            for m in REFERENCE.finditer(line):
                name, named = m.group(1), m.group(2)
                if name not in defined:
                    problems.append(f"{path}:{number}: Note [{name}] is defined nowhere")
                    continue
                if named is None:
                    continue
                home = defined[name][0]
                candidates = {named, os.path.normpath(os.path.join(os.path.dirname(path), named))}
                if home not in candidates and not home.endswith("/" + named.lstrip("./")):
                    problems.append(f"{path}:{number}: Note [{name}] is said to be in {named}, "
                                    f"but {home} holds it")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} broken Note reference(s)")
        return 1
    print(f"notes: {len(defined)} notes, every reference points at its file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
