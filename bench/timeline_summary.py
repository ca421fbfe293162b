#!/usr/bin/env python3
"""timeline_summary.py - what a VT_GPU_TIMELINE file says about decode.

Marks (one per line, "kind ms"): R before an ids/logits copy to the host (the
stream reached it: the router is done), d/D around a demand copy (context
stream), a/A around an ahead copy (ahead stream), J after the context stream
joined the ahead copies, m/M around moe_ffn (not recorded inside a graph), g/G
around a graph launch (a decode graph or segment). A step is the interval between
two R marks. Of several contexts' sections the one with the most marks is
read. Prints, over the last FRAC of the file: the span, the time the
link carried a copy (union of d..D and a..A), and per step the mean of: R to
the next context-stream mark (the host's turn: ids to the host, acquire,
launch), the demand copies, the moe_ffn calls, the rest.
  timeline_summary.py FILE [FRAC=0.8]
"""
import sys

# one section per backend context ("# context N: M marks"); the busiest is read
sections, cur = [], None
for l in open(sys.argv[1]):
    if l.startswith('#') or cur is None:
        cur = []; sections.append(cur)
        if l.startswith('#'): continue
    if l.strip(): cur.append((l.split()[0], float(l.split()[1])))
marks = max(sections, key=len) if sections else []
if len(marks) < 2:
    sys.exit(f"{sys.argv[1]}: fewer than two marks (was VT_GPU_TIMELINE set for the run?)")
frac = float(sys.argv[2]) if len(sys.argv) > 2 else 0.8
marks = marks[int(len(marks) * (1 - frac)):]
# pair intervals in record order per kind
def pairs(b, e):
    out, st = [], None
    for k, t in marks:
        if k == b: st = t
        elif k == e and st is not None:
            out.append((st, t)); st = None
    return out
dem, ahd, moe = pairs('d', 'D'), pairs('a', 'A'), pairs('m', 'M')
gr = pairs('g', 'G')
t0 = min(t for _, t in marks); t1 = max(t for _, t in marks)
span = t1 - t0
iv = sorted(dem + ahd)
busy, cur = 0.0, None
for s, e in iv:
    if cur is None or s > cur[1]:
        if cur: busy += cur[1] - cur[0]
        cur = [s, e]
    else: cur[1] = max(cur[1], e)
if cur: busy += cur[1] - cur[0]
Rs = [t for k, t in marks if k == 'R']
print(f"span {span:.3f} ms, {len(Rs)} steps (R marks), link busy {busy:.3f} ms = {100*busy/span:.1f}%")
print(f"demand copies {len(dem)}: {sum(e-s for s,e in dem):.3f} ms; ahead copies {len(ahd)}: {sum(e-s for s,e in ahd):.3f} ms; moe_ffn {len(moe)}: {sum(e-s for s,e in moe):.3f} ms; graphs {len(gr)}: {sum(e-s for s,e in gr):.3f} ms")
# per step on the context stream
ctx = [(k, t) for k, t in marks if k in 'RdDJmM']
host, dspan, jwait, mspan, rest, n = 0, 0, 0, 0, 0, 0
idle = 0.0
for i, (k, t) in enumerate(ctx):
    if k != 'R': continue
    j = i + 1
    while j < len(ctx) and ctx[j][0] != 'R': j += 1
    if j >= len(ctx): break
    seg = ctx[i:j + 1]
    n += 1
    host += seg[1][1] - t if len(seg) > 1 else 0
    ds = [x for x in seg if x[0] in 'dD']
    if ds: dspan += ds[-1][1] - ds[0][1]
    ms = [x for x in seg if x[0] in 'mM']
    if ms: mspan += ms[-1][1] - ms[0][1]; rest += ctx[j][1] - ms[-1][1]
    # link idle inside this step
    a, b = t, ctx[j][1]
    cov = 0.0
    for s, e in iv:
        s2, e2 = max(s, a), min(e, b)
        if e2 > s2: cov += e2 - s2
    idle += (b - a) - min(cov, b - a)
if n:
    print(f"per step (mean of {n}): R -> next mark {1000*host/n:.1f} us, demand copies {1000*dspan/n:.1f} us, "
          f"moe_ffn {1000*mspan/n:.1f} us, graphs {1000*sum(e-s for s,e in gr)/max(1,len(Rs)):.1f} us, last M -> next R {1000*rest/n:.1f} us, link idle {1000*idle/n:.1f} us")
sz = [e - s for s, e in dem]
if sz: print(f"demand copy: mean {1000*sum(sz)/len(sz):.1f} us")
sz = [e - s for s, e in ahd]
if sz: print(f"ahead copy: mean {1000*sum(sz)/len(sz):.1f} us")
