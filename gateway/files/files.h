/* files: a context's workspace as the API serves it — read, list, upload,
 * delete, and the artifacts an execution leaves under output/.
 *
 * The workspace is written by sandboxed code, so every path is resolved
 * beneath the workspace root with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV): neither a
 * '..' nor a symlink planted inside can lead sandgate anywhere else on the
 * host, and every later step works on the file descriptors so resolved (no
 * path is looked up twice).  Only regular files and directories are served;
 * a FIFO or socket planted by the code is refused without being read.
 *
 * Paths are relative to the workspace root ("data/in.csv"); a leading '/'
 * is ignored.  Errors: SG_E_INVALID for a malformed path or one with '..',
 * SG_E_FORBIDDEN for a path through a symlink, SG_E_NOTFOUND, SG_E_CONFLICT
 * (a directory where a file is wanted, or the reverse), SG_E_LIMIT when the
 * workspace is full.
 */
#ifndef SG_FILES_H
#define SG_FILES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include "common/error.h"
/* The room's other half, for the rooms that include this face: files
 * anywhere inside a sandbox, as its user sees them. */
#include "gateway/files/sbfs.h"

/* Opens path for reading: a regular file or a directory (see st). */
int files_open(const char *workspace, const char *path, struct stat *st, sg_error_t **err);

/* An open directory as {path, entries: [{name, path, type, size,
 * modified}], truncated?}, entries sorted by name; type is "file", "dir",
 * "symlink" or "other" (symlinks are reported, never followed).  path is
 * the directory's own path. */
json_t *files_list(int dirfd, const char *path, sg_error_t **err);

/* Removes a file, or a directory with everything in it. */
int files_remove(const char *workspace, const char *path, sg_error_t **err);

/* An upload, written to a temporary file beside its target and renamed into
 * place on commit, so a reader never sees half a file.  Missing parent
 * directories are created.  Everything created belongs to the workspace
 * root's owner (the sandbox user). */
typedef struct files_upload files_upload_t;
files_upload_t *files_upload_begin(const char *workspace, const char *path, size_t max,
                                   sg_error_t **err);
int files_upload_write(files_upload_t *u, const void *data, size_t n, sg_error_t **err);
/* Stores the upload once every file it created belongs to the sandbox user
 * (through the launcher: once the launcher has answered each give; never
 * blocking): the temporary file is renamed into place and cb gets {path,
 * size}, or why not — the file could not be written or stored, or a give
 * failed, for instance SG_E_TIMEOUT when the launcher did not answer within
 * --launcher-timeout (the upload is then not stored).  Both borrowed.  cb is
 * called exactly once, perhaps before this returns, unless the upload is
 * aborted first.  u stays the caller's: files_upload_abort frees it, from
 * cb or later.  No more writes after this. */
typedef void(files_stored_fn)(const json_t *info, const sg_error_t *err, void *arg);
void files_upload_store(files_upload_t *u, files_stored_fn *cb, void *arg);
/* Stores the upload now, without waiting for the gives (they are carried
 * out all the same; a failure is only logged): returns {path, size} and
 * frees the upload; on failure it is removed.  For callers that cannot
 * answer later (MCP's write_file). */
json_t *files_upload_commit(files_upload_t **u_p, sg_error_t **err);
/* Removes the temporary file (unless stored) and frees the upload; safe
 * on NULL.  A files_upload_store under way is given up: cb is not called. */
void files_upload_abort(files_upload_t **u_p);

/* Artifacts: the regular files under dir (recursively) as {path: "size
 * mtime"}; at most a few thousand entries.  Empty when dir does not exist. */
json_t *files_snapshot(const char *workspace, const char *dir);
/* The files in dir now that are new or changed since before, as
 * [{path, size, mime}], sorted by path. */
json_t *files_changed(const char *workspace, const char *dir, const json_t *before);

/* A MIME type guessed from a file name's extension. */
const char *files_mime(const char *name);

#endif
