/* sandgate-preload.so: loaded into every process of a gVisor sandbox
 * (LD_PRELOAD) to paper over system calls the packaged runsc rejects.
 *
 * statx: runsc 2022-12-19 refuses AT_NO_AUTOMOUNT with EINVAL, and
 * coreutils passes it on every call, so `ls -l` and `stat` fail with
 * "Invalid argument".  The flag means nothing inside a sandbox without
 * automounts: retry without it.
 *
 * getpid: libzmq compares getpid() with its context's pid on every socket
 * call (fork detection), and pyzmq asks on every send: ~120 getpid system
 * calls per trivial execute, each a full trip through the Sentry under
 * ptrace.  The pid is cached (as glibc did before 2.25) and forgotten in a
 * fork's child (pthread_atfork); a program that makes children with a raw
 * clone system call and calls getpid in them before exec would see its
 * parent's pid — nothing in a Jupyter kernel's stack does.  glibc's own
 * internal calls (posix_spawn's child) do not come through here.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

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

static pid_t cached_pid;

static void forget_pid(void)
{
    cached_pid = 0;
}

__attribute__((constructor)) static void preload_init(void)
{
    pthread_atfork(NULL, NULL, forget_pid);
}

pid_t getpid(void)
{
    pid_t pid = __atomic_load_n(&cached_pid, __ATOMIC_RELAXED);
    if (pid == 0) {
        pid = (pid_t)syscall(SYS_getpid);
        __atomic_store_n(&cached_pid, pid, __ATOMIC_RELAXED);
    }
    return pid;
}
