#!/usr/bin/env python3
"""Condense `spin -t -p` output into one line per atomic step: the process and what it wrote.

Usage: spin -t -p -D... model.pml | python3 trail.py
"""
import re
import sys

step = re.compile(r"^\s*\d+:\s+proc\s+(\d+)\s+\((\w+):\d+\)\s+\S+:(\d+)\s+\(state \d+\)\s*(\[(.*)\])?")
out, cur, writes = [], None, []


def flush():
    if cur and writes:
        # keep the last value written to each variable within the step
        seen = {}
        for w in writes:
            m = re.match(r"([^=\s]+)\s*=\s*(.*)", w)
            if m:
                seen[m.group(1)] = m.group(2)
        shown = [f"{k}={v}" for k, v in seen.items() if not re.fullmatch(r"(i|o|e|j|t|_\w*)", k)]
        if shown:
            out.append(f"{cur[1]}({cur[0]}) line {cur[2]}: " + ", ".join(shown))


for line in sys.stdin:
    if "assertion violated" in line:
        flush()
        cur, writes = None, []
        out.append("==> " + line.strip())
        continue
    m = step.match(line)
    if not m:
        continue
    key = (m.group(1), m.group(2))
    if cur is None or key != cur[:2]:
        flush()
        cur, writes = (m.group(1), m.group(2), m.group(3)), []
    if m.group(5) and "=" in m.group(5) and "==" not in m.group(5):
        writes.append(m.group(5))
flush()
print("\n".join(out))
