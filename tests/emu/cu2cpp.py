#!/usr/bin/env python3
"""Rewrites a CUDA source into C++ the kernel emulator (tests/emu) compiles:
every launch `kernel<<<grid, block[, smem[, stream]]>>>(args);` becomes
`emu::launch([&] { kernel(args); }, grid, block, smem, stream);`, and every
`extern __shared__ [__align__(n)] T name[];` becomes a pointer to the
launch's dynamic shared memory. Everything else is left to the emulator's
headers (tests/emu/include). A #line directive keeps compiler messages on
the .cu file's own lines.

    cu2cpp.py IN.cu OUT.cpp
"""
import re
import sys


def matching(text, i, open_ch, close_ch):
    """Index just past the bracket that closes text[i] (an open_ch)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_ch:
            depth += 1
        elif text[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    raise SystemExit(f"cu2cpp: unbalanced {open_ch} at offset {i}")


def split_top(text):
    """text split at its top-level commas."""
    parts, depth, start = [], 0, 0
    for j, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:j].strip())
            start = j + 1
    parts.append(text[start:].strip())
    return parts


def rewrite_launches(src):
    out, pos = [], 0
    callee = re.compile(r"([A-Za-z_]\w*(?:<[^<>;]*>)?)\s*$")
    while True:
        i = src.find("<<<", pos)
        if i < 0:
            out.append(src[pos:])
            return "".join(out)
        m = callee.search(src, pos, i)
        if not m:
            raise SystemExit(f"cu2cpp: a launch without a kernel name at offset {i}")
        j = src.find(">>>", i)
        config = split_top(src[i + 3:j])
        k = src.index("(", j)
        end = matching(src, k, "(", ")")
        args = src[k + 1:end - 1]
        # keep the line count: the launch's newlines go after it
        newlines = src[m.start(1):end].count("\n")
        out.append(src[pos:m.start(1)])
        out.append(f"emu::launch([&] {{ {m.group(1)}({' '.join(args.split())}); }}, {', '.join(config)})")
        out.append("\n" * newlines)
        pos = end


SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([\w\s]+?)\s*(\w+)\s*\[\s*\]\s*;")


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    src = open(sys.argv[1]).read()
    src = SHARED.sub(lambda m: f"{m.group(1)} *{m.group(2)} = ({m.group(1)} *)emu::dyn_smem();", src)
    src = rewrite_launches(src)
    with open(sys.argv[2], "w") as f:
        f.write(f'#line 1 "{sys.argv[1]}"\n{src}')


if __name__ == "__main__":
    main()
