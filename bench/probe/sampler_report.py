#!/usr/bin/env python3
"""Reads a bench/probe/sampler.cpp output and prints where the sampled thread spent its time:
functions by self samples (the innermost frame) and by inclusive samples (anywhere on the
stack), symbolised with addr2line. A probe, not part of kiln.
  sampler_report.py sampler.out [TOP]"""
import collections
import subprocess
import sys


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    maps, stacks = [], []
    with open(path) as f:
        for line in f:
            if line.startswith("map "):
                parts = line[4:].split()
                if len(parts) >= 6 and "x" in parts[1]:
                    lo, hi = (int(x, 16) for x in parts[0].split("-"))
                    maps.append((lo, hi, int(parts[2], 16), parts[5]))
            elif line.startswith("stack"):
                stacks.append([int(x, 16) for x in line.split()[1:]])
    # The first two frames are the handler and the signal trampoline.
    stacks = [s[2:] for s in stacks if len(s) > 2]

    def place(address):
        for lo, hi, offset, name in maps:
            if lo <= address < hi:
                return name, address - lo + offset
        return "?", address

    where = {}
    for stack in stacks:
        for k, address in enumerate(stack):
            if address not in where:
                where[address] = place(address - (1 if k > 0 else 0))
    by_file = collections.defaultdict(set)
    for name, offset in where.values():
        by_file[name].add(offset)
    names = {}
    for name, offsets in by_file.items():
        offsets = sorted(offsets)
        result = None
        if name.startswith("/"):
            try:
                result = subprocess.run(
                    ["addr2line", "-f", "-C", "-e", name] + [hex(o) for o in offsets],
                    capture_output=True, text=True, check=True).stdout.splitlines()[0::2]
            except (OSError, subprocess.CalledProcessError):
                result = None
        short = name.rsplit("/", 1)[-1]
        for k, offset in enumerate(offsets):
            symbol = result[k] if result and k < len(result) and result[k] != "??" else None
            names[(name, offset)] = f"{symbol[:110]} [{short}]" if symbol else f"[{short}]"
    self_count, inclusive = collections.Counter(), collections.Counter()
    for stack in stacks:
        frames = [names[where[a]] for a in stack]
        if frames:
            self_count[frames[0]] += 1
        for frame in set(frames):
            inclusive[frame] += 1
    total = max(1, len(stacks))
    print(f"{len(stacks)} samples")
    for title, counter in (("self", self_count), ("inclusive", inclusive)):
        print(f"-- {title}")
        for frame, count in counter.most_common(top):
            print(f"{100 * count / total:6.1f}%  {frame}")


main()
