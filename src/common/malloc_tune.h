/* glibc's malloc, tuned for processes that move large messages through
 * gRPC (chimed, the tools, chime-bench). */
#ifndef CHIME_COMMON_MALLOC_TUNE_H
#define CHIME_COMMON_MALLOC_TUNE_H

/* gRPC reads and frees buffers of up to a message's size on its own
 * threads. With glibc's defaults each thread's arena gives the memory back
 * (madvise, a smaller heap) when it is freed and faults it in again for the
 * next message: measured here, about half of a stream-mode learner's system
 * time at 1 MiB batches. This keeps up to 256 MiB of free memory per arena
 * and serves allocations up to 32 MiB from the arenas (glibc's largest
 * mmap threshold), so the memory is reused. Process-wide; a no-op without
 * glibc, and when the process has set GLIBC_TUNABLES (the operator's
 * choice wins). Learners embedding libchime can set the same with
 * GLIBC_TUNABLES=glibc.malloc.trim_threshold=268435456:glibc.malloc.mmap_threshold=33554432
 * (docs/operations.md). */
void chime__malloc_tune(void);

#endif
