/* records: a directory of small JSON records, one file per id, that carry
 * state over a restart (STATE/mcp, STATE/contexts).
 *
 * A record is written to a temporary file and renamed into place, so a
 * reader sees the old record or the new one, never half of one.  Ids are
 * used as file names: callers pass only ids they made (UUIDs).
 */
#ifndef SG_RECORDS_H
#define SG_RECORDS_H

#include <jansson.h>

#include "common/error.h"

typedef struct records records_t;

/* Opens (creating, mode 0700) dir; what names the records in log lines.
 * NULL with *err when the directory cannot be used. */
records_t *records_open(const char *dir, const char *what, sg_error_t **err);
void records_close(records_t **self_p);

/* Writes rec (borrowed) as id's record; logs and returns -1 on failure. */
int records_put(records_t *self, const char *id, const json_t *rec);
void records_remove(records_t *self, const char *id);

/* Writes doc (borrowed) to path, mode 0600, by a temporary file renamed
 * into place (and synced), so a reader sees the old file or the new one;
 * logs and returns -1 on failure.  For a list kept in one file. */
int records_write_file(const char *path, const json_t *doc);

/* Calls fn for each record whose "id" field names its file; removes the
 * others (malformed, or written by hand).  rec is borrowed for the call. */
typedef void(records_fn)(const char *id, const json_t *rec, void *arg);
void records_each(records_t *self, records_fn *fn, void *arg);

#endif
