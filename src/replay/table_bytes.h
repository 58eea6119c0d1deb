/* A table's variable-size row bytes in a file (docs/operations.md,
 * "Tables in files"): each row's compressed leaves and each row's ragged
 * leaves are one extent of NAME.bytes under the data dir, mapped
 * MAP_SHARED. Extents are sized in classes (16-byte granules, four
 * classes per power of two: at most 25% over the bytes, about 12% on
 * average); a freed extent goes on its class's free list and is taken
 * again by the next extent of that class, else the file's end moves on
 * (the file grows in steps of 8 MiB or an eighth of its size, allocated, so a
 * full disk fails an insert, never a later page fault). Where the extents are
 * is in the table's main file (the rows' records): at open the free lists are
 * rebuilt from the gaps between the live rows' extents, nothing read from
 * this file. chimed's memory for it: 8 bytes per free extent. */
#ifndef CHIME_REPLAY_TABLE_BYTES_H
#define CHIME_REPLAY_TABLE_BYTES_H

#include <stddef.h>
#include <stdint.h>

typedef struct chime__tbl_bytes_s chime__tbl_bytes_t;

/* Where a row's bytes are: len 0 for none. In the table's main file. */
typedef struct {
  uint64_t off;
  uint32_t len, pad;
} chime__tbl_extent_t;

/* The bytes an extent of len bytes takes (its class's size). */
uint64_t chime__tbl_bytes_class(uint64_t len);

/* Opens (fresh: makes anew, empty) the file at path, mapping room for
 * limit bytes (the file grows up to it). 0 or a CHIME_E code with the
 * thread's detail naming the path. */
int chime__tbl_bytes_open(chime__tbl_bytes_t **out, const char *path,
                          uint64_t limit, int fresh);
void chime__tbl_bytes_close(chime__tbl_bytes_t *b);
uint8_t *chime__tbl_bytes_base(const chime__tbl_bytes_t *b);
/* The file's bytes now (allocated on disk), and the end of its extents
 * (those past it never used since the file was made or opened). */
uint64_t chime__tbl_bytes_file_size(const chime__tbl_bytes_t *b);
/* Its bytes on disk (allocated blocks), and any open file's: 0 when it
 * cannot be looked at. */
uint64_t chime__tbl_bytes_disk(const chime__tbl_bytes_t *b);
uint64_t chime__tbl_fd_disk_bytes(int fd);
uint64_t chime__tbl_bytes_end(const chime__tbl_bytes_t *b);

/* Room for extents of need bytes (their classes' sizes summed) without
 * any free one: the file grown when short. Before the rows are taken, so
 * that a full disk refuses the insert with nothing stored: 0, or
 * CHIME_ERESOURCE with the thread's detail. */
int chime__tbl_bytes_reserve(chime__tbl_bytes_t *b, uint64_t need);
/* An extent of len > 0 bytes (after reserve): its offset. */
uint64_t chime__tbl_bytes_alloc(chime__tbl_bytes_t *b, uint32_t len);
void chime__tbl_bytes_free(chime__tbl_bytes_t *b, chime__tbl_extent_t e);

/* One live row's extent, for rebuild. */
typedef struct {
  chime__tbl_extent_t e;
  uint32_t row;
} chime__tbl_live_extent_t;

/* At open, from the live rows' extents (n, reordered): each inside the
 * file and none over another, else CHIME_ECORRUPT with the thread's
 * detail naming the row; the gaps become free extents. */
int chime__tbl_bytes_rebuild(chime__tbl_bytes_t *b,
                             chime__tbl_live_extent_t *live, size_t n);

#endif
