#!/usr/bin/env python3
"""Where a handle's open spends its time, from the TRACE lines of a trace build (`--features
trace`, GDSROUTE_TRACE_FILE; docs/performance.md, "Many small files"): the steps of
`gdsroute_file_open` on the opening thread (open.start, open.descriptor, open.page_cache,
open.handle, open.cufile_start_asked, open.context_found, open.end), each step's median, p90,
max and sum, and the opens' cadence.

    LD_LIBRARY_PATH=.device/trace GDSROUTE_TRACE_FILE=/tmp/t.txt .device/many_files DIR 512 2M batch --warm-up
    python3 tools/probes/open-timeline.py /tmp/t.txt
"""
import sys, collections
ev=[l.split() for l in open(sys.argv[1]) if l.startswith("TRACE ")]
ev=[(float(t),th,n) for _,t,th,n,v in ev]
ph=collections.defaultdict(list); prev=None; opens=[]
for t,th,n in ev:
    if th!='t0': continue
    if n=='open.start': prev=(t,n); st=t
    elif n.startswith('open.') and prev:
        ph[prev[1]+'->'+n].append(t-prev[0]); prev=(t,n)
        if n=='open.end': opens.append(t-st); prev=None
for k,v in ph.items():
    v.sort(); print("%-45s n %4d median_us %7.1f p90 %7.1f max %8.1f sum_ms %.2f"%(k,len(v),v[len(v)//2],v[int(len(v)*.9)],v[-1],sum(v)/1000))
opens.sort(); print("open total n %d median %.1f p90 %.1f sum_ms %.2f"%(len(opens),opens[len(opens)//2],opens[int(len(opens)*.9)],sum(opens)/1000))
s=[t for t,th,n in ev if th=='t0' and n=='open.start']
if len(s)>2: d=sorted(b-a for a,b in zip(s[1:],s[2:])); print("open.start to next open.start median %.1f p90 %.1f"%(d[len(d)//2],d[int(len(d)*.9)]))
