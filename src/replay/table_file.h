/* A table's storage in a file under its data directory (docs/operations.md,
 * "Tables in files"): the same layout as in memory behind a header page,
 * mapped MAP_SHARED so that the page cache is the cache, and a per-row
 * commit word that says which rows hold an item, in insert order. A table
 * opened on the file of a chimed before it (killed or not) rebuilds its
 * indexes from the rows' records and commit words, never reading a leaf.
 * Native byte order: the file moves with the machine, not across. */
#ifndef CHIME_REPLAY_TABLE_FILE_H
#define CHIME_REPLAY_TABLE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "replay/table_config.h"

typedef struct chime__tbl_file_s chime__tbl_file_t;

/* The header's bytes: the table's layout starts this far into the file. */
#define CHIME__TBL_FILE_HEADER 4096u
#define CHIME__TBL_FILE_VERSION 1u

/* The file's name under the data dir, for messages and tests. */
int chime__tbl_file_path(const chime__table_config_t *cfg, char *buf,
                         size_t len);

/* Maps the table's file (len bytes: the header and its layout of rows
 * rows): made and allocated whole (posix_fallocate: a full disk fails
 * here, not as a SIGBUS later) when there is none, *fresh then 1; else
 * the file from before, checked to be this config's (its fingerprint,
 * capacity, rows and size), *fresh 0. The file is locked while open: a
 * second chimed on it is refused. 0, or a CHIME_E code with the thread's
 * detail (common/detail.h) naming the path and what is wrong. */
int chime__tbl_file_map(chime__tbl_file_t **out,
                        const chime__table_config_t *cfg, uint64_t rows,
                        size_t len, void **map, int *fresh);
/* Unmaps and closes (NULL: nothing). */
void chime__tbl_file_close(chime__tbl_file_t *f, void *map, size_t len);

/* Keys below count end (key_pos) may be issued: kept in the header, so a
 * reopened table goes on past every key the one before could have acked. */
void chime__tbl_file_keys(chime__tbl_file_t *f, uint64_t end);
uint64_t chime__tbl_file_key_end(const chime__tbl_file_t *f);

/* Row r's compressed leaves in the bytes file (table_bytes.h) of table
 * t (chime-bench bigtable's pread loop): their extent, 0; -1 when t keeps
 * none there. */
struct chime__table_s;
int chime__tbl_file_zextent(const struct chime__table_s *t, uint32_t r,
                            uint64_t *off, uint32_t *len);

/* The bytes the file holds on disk (its allocated blocks), 0 when it
 * cannot be looked at. */
uint64_t chime__tbl_file_disk_bytes(const chime__tbl_file_t *f);

/* Leaf arrays [p, p + n) are read at random rows: no readahead. */
void chime__tbl_file_random(void *p, size_t n);

/* A batch's rows of a leaf this large or larger are asked for all at once
 * before the copy (MADV_WILLNEED: the reads of the batch's rows in flight
 * together, each row one read), where the copy's faults would read them a
 * page at a time, one after another. Smaller rows are a page or less. */
#define CHIME__TBL_FILE_ASK_BYTES 4096u
void chime__tbl_file_ask(const void *p, size_t n);

#endif
