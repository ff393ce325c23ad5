#!/usr/bin/env python3
"""One line per kernel from an Nsight Compute CSV (ncu --csv --log-file F):
duration, DRAM bytes read and written, DRAM throughput, achieved occupancy,
registers and launch shape; warp instructions and the L2 hit rate where
the CSV has them.  Usage: python bench/ncu_summary.py F"""
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr_i = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
hdr = rows[hdr_i]; data = rows[hdr_i + 2:] if rows[hdr_i+1][0]=="" else rows[hdr_i+1:]
col = {n: i for i, n in enumerate(hdr)}
k = collections.OrderedDict()
for r in data:
    key = (r[col["ID"]], r[col["Kernel Name"]][:38])
    k.setdefault(key, {})[r[col["Metric Name"]]] = r[col["Metric Value"]]
for (i, name), m in k.items():
    g = lambda n: m.get(n, "?")
    print(f"{i:>3} {name:38s} t={g('gpu__time_duration.sum'):>8}ns rd={g('dram__bytes_read.sum'):>12} wr={g('dram__bytes_write.sum'):>12} dram%={g('dram__throughput.avg.pct_of_peak_sustained_elapsed'):>6} occ%={g('sm__warps_active.avg.pct_of_peak_sustained_active'):>6} reg={g('launch__registers_per_thread')} grid={g('launch__grid_size')} blk={g('launch__block_size')}"
          + (f" inst={m['smsp__inst_executed.sum']}" if "smsp__inst_executed.sum" in m else "")
          + (f" l2hit%={m['lts__t_sector_hit_rate.pct']}" if "lts__t_sector_hit_rate.pct" in m else ""))
