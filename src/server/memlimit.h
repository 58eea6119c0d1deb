/* How much memory chimed may fill: physical memory, or less under a cgroup
 * limit. The start-up check compares the tables' full size with it. */
#ifndef CHIME_SERVER_MEMLIMIT_H
#define CHIME_SERVER_MEMLIMIT_H

#include <stddef.h>
#include <stdint.h>

/* The smaller of physical memory and this process's cgroup limit (v2
 * memory.max, v1 memory.limit_in_bytes; of its own cgroup when visible,
 * else of the root). `what` names where the figure came from. UINT64_MAX
 * when nothing could be read. */
uint64_t chime__memory_limit(char *what, size_t whatlen);

#endif
