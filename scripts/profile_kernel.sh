#!/usr/bin/env bash
# Profiles one kernel of a program with Nsight Compute on the GPU machine and writes a short,
# readable digest: the speed-of-light and occupancy figures, the warp stall reasons, and the
# SASS lines where the most stall samples fell.
#
#   scripts/profile_kernel.sh NAME KERNEL_REGEX PROGRAM [ARGS...]
#
# NAME names the outputs ($OUT/NAME.txt, the digest; $OUT/NAME-sass.txt, the top SASS lines).
# KERNEL_REGEX selects the kernel (ncu -k regex:...); the first matching launch is profiled.
# Clocks are left as they are (--clock-control none), as the device notes ask.
set -u -o pipefail
name=$1 kernel=$2
shift 2
OUT="${OUT:-./out}"
mkdir -p "$OUT"
rep="/tmp/$name.ncu-rep"
rm -f "$rep"
ncu --clock-control none -k "regex:$kernel" -c 1 --set full --import-source yes -f -o "${rep%.ncu-rep}" "$@" \
  >"$OUT/$name-run.log" 2>&1 || { tail -20 "$OUT/$name-run.log"; exit 1; }
{
  ncu -i "$rep" --page details --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis 2>&1 |
    grep -vE '^\s*$|^\s*-{5,}'
  echo
  echo "== warp stall reasons (cycles per issued instruction)"
  ncu -i "$rep" --page raw --csv 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
head, units, vals = rows[0], rows[1], rows[2]
pairs = [(h.split("smsp__average_warps_issue_stalled_")[1].split("_per_issue_active")[0], v)
         for h, v in zip(head, vals)
         if h.startswith("smsp__average_warps_issue_stalled_") and h.endswith("per_issue_active.ratio")]
for k, v in sorted(pairs, key=lambda p: -float(p[1] or 0)):
    if float(v or 0) > 0.01: print(f"  {k:28s} {float(v):8.3f}")
'
} >"$OUT/$name.txt"
# Per-SASS-instruction stall samples, the 60 heaviest lines.
ncu -i "$rep" --page source --csv --print-source sass 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
# The export may open with a line naming the kernel: the header is the first row with "Source".
start = next((i for i, r in enumerate(rows) if "Source" in r), None)
if start is None:
    print("no source table; first rows:", rows[:3]); sys.exit()
rows = rows[start:]
head = rows[0]
def col(*names):
    for n in names:
        if n in head: return head.index(n)
    return None
src = col("Source"); samp = col("Warp Stall Sampling (All Samples)", "Warp Stall Sampling (All Cycles)")
addr = col("Address")
if src is None or samp is None:
    print("columns:", head); sys.exit()
body = [r for r in rows[1:] if len(r) > samp and r[samp].replace(".", "").isdigit()]
total = sum(float(r[samp]) for r in body) or 1
for r in sorted(body, key=lambda r: -float(r[samp]))[:60]:
    print(f"{100*float(r[samp])/total:6.2f}%  {r[addr] if addr is not None else ""}  {r[src][:150]}")
' >"$OUT/$name-sass.txt"
head -40 "$OUT/$name.txt"
