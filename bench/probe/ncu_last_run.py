# The kernels of a program's last unit of work (a forward, a training step) from two Nsight
# Compute CSVs (--metrics gpu__time_duration.sum --csv) of the program doing n and n + 1 units:
# those past the shorter run's count, summed by kernel name, the TOP longest first (25).
#   python3 ncu_last_run.py SHORTER.csv LONGER.csv [TOP]
import collections
import csv
import sys


def rows(path):
    return [r for r in csv.DictReader(open(path))
            if r.get('Metric Name') == 'gpu__time_duration.sum']


last = rows(sys.argv[2])[len(rows(sys.argv[1])):]
scale = {'ns': 1e-3, 'nsecond': 1e-3, 'us': 1.0, 'usecond': 1.0, 'ms': 1e3, 'msecond': 1e3}
by_name = collections.defaultdict(lambda: [0, 0.0])
for r in last:
    us = float(r['Metric Value'].replace(',', '')) * scale[r['Metric Unit']]
    by_name[r['Kernel Name'][:100]][0] += 1
    by_name[r['Kernel Name'][:100]][1] += us
total = sum(v[1] for v in by_name.values())
top = int(sys.argv[3]) if len(sys.argv) > 3 else 25
for name, (n, us) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]:
    print(f"{us / 1e3:8.2f} ms {n:4d}x  {name}")
print(f"{total / 1e3:8.2f} ms in {len(last)} kernels")
