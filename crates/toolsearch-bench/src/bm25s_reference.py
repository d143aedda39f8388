"""The BM25 library reference of `toolsearch bench search`: bm25s on the same catalog and queries.

Run by `toolsearch-bench search` (embedded with include_str!) with the Python that has bm25s and
PyStemmer (scripts/install-bench-peers.sh), as `python -c SCRIPT INPUT`, where INPUT is a JSON
file: {"k": 10, "texts": [one text per tool], "queries": [...]}. The texts are composed by the
caller as the published reference composed them (the name split into words, the description, the
parameters' names and descriptions).

Build: bm25s's Tokenizer (English stopwords, PyStemmer's English stemmer) over every text, then
BM25.index (bm25s's defaults: Lucene's BM25, k1 1.5, b 0.75; scipy builds the sparse matrix).
Queries: one at a time on this one thread, as an agent asks them: each is tokenized against the
index's vocabulary and its top k retrieved (`retrieve`, n_threads=0: no pool); every query runs
once untimed, then once timed. That is the library's quickest documented path for a single query
(its Tokenizer, ids in, no per-call vocabulary).

Prints one JSON line: {"library", "build_ms", "latencies_us" (one per query, in order), "errors",
"rss_at_start_mb", "rss_before_build_mb", "peak_rss_mb"}. Memory is read as the engine's child
reads its own: VmRSS after the imports and after the input is read, then the kernel's peak counter
reset and VmHWM read at the end (null where /proc is not there).
"""

import json
import os
import sys
import time

MIB = 1024.0 * 1024.0


def status_mb(key):
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024.0 / MIB
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
    except OSError:
        pass


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python -c SCRIPT INPUT.json (run by toolsearch-bench search)")
    import bm25s
    import Stemmer

    rss_at_start_mb = status_mb("VmRSS:")
    with open(sys.argv[1], encoding="utf-8") as f:
        workload = json.load(f)
    texts = workload["texts"]
    queries = workload["queries"]
    k = min(int(workload["k"]), len(texts))
    if k == 0:
        sys.exit("no tools to index: the catalog is empty")

    rss_before_build_mb = status_mb("VmRSS:")
    reset_peak_rss()
    started = time.perf_counter()
    tokenizer = bm25s.tokenization.Tokenizer(
        stopwords="en", stemmer=Stemmer.Stemmer("english")
    )
    corpus = tokenizer.tokenize(texts, show_progress=False, return_as="tuple")
    retriever = bm25s.BM25(csc_backend="auto")
    retriever.index(corpus, show_progress=False)
    build_ms = (time.perf_counter() - started) * 1e3

    errors = 0

    def search(query):
        ids = tokenizer.tokenize(
            [query], update_vocab=False, show_progress=False, return_as="ids"
        )
        return retriever.retrieve(ids, k=k, show_progress=False, n_threads=0)

    for query in queries:
        try:
            search(query)
        except Exception:  # counted below, where it is timed
            pass
    latencies_us = []
    for query in queries:
        started = time.perf_counter_ns()
        try:
            search(query)
        except Exception:
            errors += 1
        latencies_us.append((time.perf_counter_ns() - started) / 1e3)

    print(
        json.dumps(
            {
                "library": f"bm25s {bm25s.__version__}",
                "build_ms": build_ms,
                "latencies_us": latencies_us,
                "errors": errors,
                "rss_at_start_mb": rss_at_start_mb,
                "rss_before_build_mb": rss_before_build_mb,
                "peak_rss_mb": status_mb("VmHWM:"),
            }
        )
    )


if __name__ == "__main__":
    main()
