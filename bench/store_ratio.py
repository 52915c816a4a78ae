#!/usr/bin/env python3
"""What the large-document store bar (issue 34: store <= 0.25x the JSON of
the 90-900 KB documents) asks of a compressor, on large_docs.py's corpus.

Prints, for case (c) documents made exactly as large_docs.py makes them:
- the corpus's entropy bound: its words are drawn independently from a
  fixed table, so no coder stores a word in fewer bits than the table's
  entropy (the JSON around them is a rounding error);
- zstd (the store's codec, through libzstd) per document, in frames of the
  structured format's size and whole, at several levels;
- the standard library's bzip2 (BWT) and xz (LZMA) per document, with their
  decode speed, for comparison.

    python3 bench/store_ratio.py [--docs 20] [--seed 1]

Nothing here is Corvid's code: it measures the codecs on the same bytes.
"""
import argparse
import bz2
import collections
import ctypes
import ctypes.util
import json
import lzma
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import large_docs  # noqa: E402


def zstd_lib():
    lib = ctypes.CDLL(ctypes.util.find_library("zstd") or "libzstd.so.1")
    lib.ZSTD_compressBound.restype = ctypes.c_size_t
    lib.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
    lib.ZSTD_compress.restype = ctypes.c_size_t
    lib.ZSTD_compress.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    return lib


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    corpus = large_docs.Corpus("c", args.seed)
    docs = [json.dumps(corpus.document(n), separators=(",", ":")).encode() for n in range(args.docs)]
    total = sum(map(len, docs))
    print("%d case (c) documents, %.1f MB of JSON (%.0f KB each on average)"
          % (len(docs), total / 1e6, total / len(docs) / 1e3))

    counts = collections.Counter(corpus.table)
    n = len(corpus.table)
    bits = -sum(c / n * math.log2(c / n) for c in counts.values())
    print("entropy bound: %.2f bits per word of %.2f bytes (space included): %.3f of the text"
          % (bits, corpus.mean_token, bits / (8 * corpus.mean_token)))

    z = zstd_lib()
    out = ctypes.create_string_buffer(z.ZSTD_compressBound(max(map(len, docs))))

    def zstd_size(data, level):
        r = z.ZSTD_compress(out, len(out), data, len(data), level)
        assert not z.ZSTD_isError(r)
        return r

    print("zstd per document (no dictionary), stored / JSON:")
    for frame in (16 << 10, 64 << 10, 256 << 10, None):
        cells = []
        for level in (1, 3, 9, 19):
            t0 = time.perf_counter()
            size = sum(zstd_size(d[i:i + frame] if frame else d, level)
                       for d in docs for i in (range(0, len(d), frame) if frame else (0,)))
            secs = time.perf_counter() - t0
            cells.append("level %d %.3f (%.0f MB/s)" % (level, size / total, total / secs / 1e6))
        print("  %-16s %s" % ("frames of %d KiB" % (frame >> 10) if frame else "whole document", "; ".join(cells)))

    for name, compress, decompress in (("bzip2 -9", lambda d: bz2.compress(d, 9), bz2.decompress),
                                       ("xz -9", lambda d: lzma.compress(d, preset=9), lzma.decompress)):
        packed = [compress(d) for d in docs]
        t0 = time.perf_counter()
        for p in packed:
            decompress(p)
        secs = time.perf_counter() - t0
        print("%-9s per document: %.3f, decodes %.0f MB/s of JSON"
              % (name, sum(map(len, packed)) / total, total / secs / 1e6))


if __name__ == "__main__":
    main()
