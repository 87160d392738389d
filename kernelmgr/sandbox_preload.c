/* sandgate-preload.so: loaded into every process of a gVisor sandbox
 * (LD_PRELOAD) to paper over system calls the packaged runsc rejects.
 *
 * statx: runsc 2022-12-19 refuses AT_NO_AUTOMOUNT with EINVAL, and
 * coreutils passes it on every call, so `ls -l` and `stat` fail with
 * "Invalid argument".  The flag means nothing inside a sandbox without
 * automounts: retry without it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>

typedef int(statx_fn)(int, const char *, int, unsigned int, struct statx *);

int statx(int dirfd, const char *restrict path, int flags, unsigned int mask,
          struct statx *restrict buf)
{
    static statx_fn *real;
    if (real == NULL)
        real = (statx_fn *)dlsym(RTLD_NEXT, "statx");
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    int r = real(dirfd, path, flags, mask, buf);
    if (r < 0 && errno == EINVAL && (flags & AT_NO_AUTOMOUNT))
        r = real(dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
    return r;
}
