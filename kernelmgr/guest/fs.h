/* fs: `sandgate-init --fs OP ARGS...`, file operations run inside a
 * sandbox for gateway/files/sbfs.c (the protocol is in fs.c), a
 * directory's watch (watch.c) and a terminal (pty.c) for gateway/envd/. */
#ifndef SG_SANDBOX_FS_H
#define SG_SANDBOX_FS_H

#include <stdbool.h>
#include <stdio.h>

/* argv[0] is OP; returns the exit status. */
int sandbox_fs_main(int argc, char **argv);

/* What watch.c shares with fs.c: s as a JSON string; path's entry (links
 * not followed), false when it is gone; the failure line on stderr
 * ({"errno", "message"}), returning 1. */
void fs_put_str(FILE *f, const char *s);
bool fs_put_entry(FILE *f, const char *path);
int fs_fail(int errnum, const char *what, const char *path);

/* watch PATH RECURSIVE ENTRIES: the exit status. */
int fs_watch(const char *path, bool recursive, bool entries);

/* `--pty ROWS COLS PROGRAM [ARGS...]`, a command on a terminal (pty.c):
 * argv[0] is ROWS; the program's exit status. */
int sandbox_pty_main(int argc, char **argv);

#endif
