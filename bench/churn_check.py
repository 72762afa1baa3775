#!/usr/bin/env python3
"""Holds churn_bench's samples against churn's truth log (bench/churn.sh).

    churn_check.py TRUTH_LOG SAMPLE_LOG

A usage reported for a tid is right only if one single thread lived under
that tid from the sample's baseline read (the key's previous non-gated
cycle) to this read: some thread started ("b") before the end of the
baseline cycle and did not end ("e") before the start of this cycle.
Otherwise two threads shared the tid in between and the usage mixes them.
Also checked: a key always names the same tid, and an "idle" thread (one
that only sleeps) never shows more than 100 permille.
Prints one line of key=value; exit status 1 when anything was wrong.
"""
import bisect
import collections
import sys


def main():
    truth, samples = sys.argv[1], sys.argv[2]
    occ = collections.defaultdict(list)   # tid -> [[born, ended or None, kind]]
    for line in open(truth):
        f = line.split()
        if len(f) != 4:
            continue
        kind, tid, what, ns = f[0], int(f[1]), f[2], int(f[3])
        if kind == 'b':
            occ[tid].append([ns, None, what])
        elif kind == 'e':
            # The latest start of this tid before the end.
            for o in reversed(occ[tid]):
                if o[0] <= ns and o[1] is None:
                    o[1] = ns
                    break
    for v in occ.values():
        v.sort()
    cycles = {}
    key_tid, key_last = {}, {}
    checked = wrong = key_moved = idle_high = first = gated = 0
    spanning_reuse = 0   # samples whose tid was reused at some time in the run
    examples = []
    for line in open(samples):
        f = line.split()
        if f[0] == 'c':
            cycles[int(f[1])] = (int(f[2]), int(f[3]))
            continue
        k, tid, key, usage, g = int(f[1]), int(f[2]), int(f[3]), int(f[4]), int(f[5])
        if key_tid.setdefault(key, tid) != tid:
            key_moved += 1
        if g:
            gated += 1
            continue
        prev = key_last.get(key)
        key_last[key] = k
        if usage < 0:
            first += 1
            continue
        if prev is None:
            wrong += 1          # a usage without a baseline read
            examples.append(f"tid {tid} key {key} usage {usage} at cycle {k}: no baseline")
            continue
        checked += 1
        base_end = cycles[prev][1]
        this_start = cycles[k][0]
        lst = occ.get(tid, [])
        if len(lst) > 1:
            spanning_reuse += 1
        ok = None
        for o in lst:
            if o[0] <= base_end and (o[1] is None or o[1] >= this_start):
                ok = o
                break
        if ok is None:
            # The sampler may have seen a thread whose "b" line is not
            # logged yet only for first reads, so this is a real mix-up.
            wrong += 1
            if len(examples) < 5:
                examples.append(f"tid {tid} key {key} usage {usage} cycles {prev}->{k}: "
                                f"no single thread lived through")
        elif ok[2] == 'idle' and usage > 100:
            idle_high += 1
            if len(examples) < 5:
                examples.append(f"idle tid {tid} key {key} usage {usage} at cycle {k}")
    reused_tids = sum(1 for v in occ.values() if len(v) > 1)
    threads = sum(len(v) for v in occ.values())
    print(f"threads_started={threads} tids_reused={reused_tids} samples_checked={checked} "
          f"samples_on_reused_tids={spanning_reuse} first_samples={first} gated={gated} "
          f"wrong_thread={wrong} key_moved={key_moved} idle_over_100={idle_high}")
    for e in examples:
        print("  " + e)
    return 1 if wrong or key_moved or idle_high else 0


if __name__ == '__main__':
    sys.exit(main())
