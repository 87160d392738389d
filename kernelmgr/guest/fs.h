/* fs: `sandgate-init --fs OP ARGS...`, file operations run inside a
 * sandbox for gateway/files/sbfs.c (the protocol is in fs.c). */
#ifndef SG_SANDBOX_FS_H
#define SG_SANDBOX_FS_H

/* argv[0] is OP; returns the exit status. */
int sandbox_fs_main(int argc, char **argv);

#endif
