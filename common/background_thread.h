#pragma once

// Threads that do background work (index workers, segment merges) run at a
// lower CPU priority than the threads that answer requests, as RavenDB runs
// its indexing threads below normal: on a machine whose cores indexing
// keeps busy, a query or an admin request then waits for a core for
// microseconds, not for a batch's time slice. Indexing still takes every
// cycle nothing else wants.

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace corvid {

// The nice value of background threads: weight 110 against a request
// thread's 1024 under the CFS scheduler.
inline constexpr int kBackgroundNice = 10;

// Lowers the calling thread's (not the process's) CPU priority. Linux keeps
// a nice value per thread; failure (e.g. a seccomp filter) leaves the
// thread as it was, which is only slower to yield.
inline void MarkBackgroundThread() {
#ifdef __linux__
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  (void)::setpriority(PRIO_PROCESS, tid, kBackgroundNice);
#endif
}

}  // namespace corvid
