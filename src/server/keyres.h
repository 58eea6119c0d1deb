/* Key reservations on disk: before a table issues keys past what it
 * reserved, chimed records a bound in the checkpoint dir (an fsynced file
 * per table, `keys-NAME`), and a restore starts keys at or past it, so a
 * key acked before a crash is never issued again to another item
 * (docs/operations.md, Checkpoints). The files only rise: each write
 * keeps the larger of the bound there and the new one. */
#ifndef CHIME_SERVER_KEYRES_H
#define CHIME_SERVER_KEYRES_H

#include <stddef.h>
#include <stdint.h>

/* The bound recorded for table in dir into *count (0 when there is no
 * file). CHIME_ECORRUPT for a file that is not one this wrote (naming
 * it in err), CHIME_ESYS for a read error. */
int chime__keyres_read(const char *dir, const char *table, uint64_t *count,
                       char *err, size_t errlen);

/* Records count for table in dir (created if missing), unless the file
 * holds a larger one: written to a temporary file, fsynced, renamed over
 * the file, the dir fsynced. 0, or CHIME_ESYS with err naming the path
 * and the system error. */
int chime__keyres_write(const char *dir, const char *table, uint64_t count,
                        char *err, size_t errlen);

#endif
