// Intra-query parallelism: the independent pieces of one expensive query
// (a prefix or fuzzy expansion's per-segment passes, chunks of a phrase's
// candidates to verify) run on the calling
// thread and on helper threads, one per other core, so that a query on a
// quiet machine uses every core (Lucene's IndexSearcher with an executor;
// Elasticsearch's concurrent segment search).
//
// The helpers serve one query at a time: a caller that finds them busy
// with another query runs its pieces itself, so a loaded server degrades
// to one thread per query instead of queueing behind a shared pool. Pieces
// are claimed, not assigned: the caller works too and takes what a helper
// has not started, so a helper that is slow to wake never delays a query.
#pragma once

#include <cstddef>

namespace corvid::postings {

// Calls fn(ctx, i) once for every i in [0, n) and returns when all calls
// have returned; calls may run concurrently on different threads, in any
// order (more than 65,535 pieces run on the caller, one after another, as
// do the pieces of a ParallelFor called from inside a piece).
void ParallelFor(size_t n, void (*fn)(void* ctx, size_t i), void* ctx);

template <class F>
void ParallelFor(size_t n, F& f) {
  ParallelFor(n, [](void* ctx, size_t i) { (*static_cast<F*>(ctx))(i); }, &f);
}

}  // namespace corvid::postings
