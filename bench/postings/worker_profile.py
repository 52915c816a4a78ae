#!/usr/bin/env python3
# Where the W2 index worker spends its time, by component.
#
#   perf record --call-graph dwarf,8192 -F 1000 -o /tmp/w2.perf \
#       build/postings_bench --peers 0 --passes 1 --queries 1 --only term
#   perf script -i /tmp/w2.perf > /tmp/w2.txt
#   python3 bench/postings/worker_profile.py /tmp/w2.txt
#
# Splits the index worker's samples (stacks through ApplyBatch) of a
# `perf script` dump of a DWARF call-graph recording into components.
import re, sys, collections
stacks, cur = [], []
for line in open(sys.argv[1]):
    line = line.rstrip()
    if not line:
        if cur: stacks.append(cur); cur = []
        continue
    if line[0] in '\t ':
        parts = line.strip().split(' ', 1)
        if len(parts) > 1: cur.append(re.sub(r'\+0x[0-9a-f]+$', '', parts[1].rsplit(' (', 1)[0]))
    else:
        cur = []
if cur: stacks.append(cur)
def cls(st):
    j = ' | '.join(st)
    if 'ApplyBatch' not in j: return None
    if 'Encode' in j:
        for k in ['BuildPairsFromLog', 'AppendPairSection', 'SortLog', 'RunToLists', 'SortedTerms']:
            if k in j: return 'encode: ' + k
        return 'encode: terms (bitmaps, tfs, positions, blocks)'
    if 'WriteFileAtomic' in j or 'WriteManifest' in j or 'Segment::Open' in j: return 'writes, fsyncs, manifest'
    if 'ResolveOldest' in j or 'ProbeAndLog' in j or 'TermIndex' in j or 'InsertTerm' in j: return 'dictionary probes and log'
    if 'SegmentBuilder::AddToken' in st[0]: return 'token hand-over (AddToken: copy, hash, prefetch)'
    if 'AnalyzerImpl' in j: return 'analyzer'
    if 'ParseInsitu' in j or 'GenericReader' in j: return 'JSON parsing'
    return 'other (id map, commit, JSON copy)'
c = collections.Counter(k for k in map(cls, stacks) if k)
n = sum(c.values())
print('worker samples', n)
for k, v in c.most_common(): print('%5d %5.1f%% %s' % (v, 100 * v / n, k))
