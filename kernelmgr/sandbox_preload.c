/* sandgate-preload.so: loaded into every process of a gVisor sandbox
 * (LD_PRELOAD) to paper over system calls the packaged runsc rejects.
 *
 * statx: runsc 2022-12-19 refuses AT_NO_AUTOMOUNT with EINVAL, and
 * coreutils passes it on every call, so `ls -l` and `stat` fail with
 * "Invalid argument".  The flag means nothing inside a sandbox without
 * automounts: retry without it.
 *
 * getpid: libzmq compares getpid() with its context's pid around every
 * socket operation (its fork check), and pyzmq does the same on each send
 * and receive: ~65 system calls per trivial execute, each a full trip
 * through the Sentry under ptrace.  Calls made from those two (found by
 * the caller's address) get the pid cached at start and again in each fork's
 * child (pthread_atfork; the cache is written nowhere else, so a vfork
 * child cannot change its parent's); every other caller still makes the
 * system call.  Python's os.getpid() stays a real system call on purpose:
 * a loop that only prints (ipykernel's OutStream.write asks for the pid)
 * must enter the Sentry now and then, or under the ptrace platform the
 * threads that should flush its output starve.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
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
static pthread_mutex_t objects_lock = PTHREAD_MUTEX_INITIALIZER;

/* The loaded objects getpid has been called from, and whether each is one of
 * zeromq's fork checkers.  Only ever appended to (under objects_lock): the
 * count is published after its entry, so readers need no lock. */
static struct object {
    uintptr_t lo, hi;
    int fork_check;
} objects[32];
static int nobjects;

static void forked(void)
{
    __atomic_store_n(&cached_pid, (pid_t)syscall(SYS_getpid), __ATOMIC_RELAXED);
}

static void lock_objects(void)
{
    pthread_mutex_lock(&objects_lock);
}

static void unlock_objects(void)
{
    pthread_mutex_unlock(&objects_lock);
}

static void forked_child(void)
{
    pthread_mutex_init(&objects_lock, NULL);
    forked();
}

__attribute__((constructor)) static void preload_init(void)
{
    forked();
    pthread_atfork(lock_objects, unlock_objects, forked_child);
}

/* Libraries that call getpid only to notice that they run in a fork's child. */
static int is_fork_checker(const char *path)
{
    static const char *const names[] = {"/libzmq.so", "/zmq/backend/", "/_asyncio.cpython-",
                                        "/libsqlite3.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strstr(path, names[i]))
            return 1;
    return 0;
}

static int add_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uintptr_t addr = (uintptr_t)data, lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        lo = a < lo ? a : lo;
        hi = a + ph->p_memsz > hi ? a + ph->p_memsz : hi;
    }
    if (addr < lo || addr >= hi)
        return 0;
    objects[nobjects] = (struct object){
        .lo = lo,
        .hi = hi,
        .fork_check = is_fork_checker(info->dlpi_name),
    };
    __atomic_store_n(&nobjects, nobjects + 1, __ATOMIC_RELEASE);
    return 1;
}

static const struct object *object_of(uintptr_t addr)
{
    int n = __atomic_load_n(&nobjects, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (addr >= objects[i].lo && addr < objects[i].hi)
            return &objects[i];
    return NULL;
}

pid_t getpid(void)
{
    uintptr_t from = (uintptr_t)__builtin_return_address(0);
    pid_t pid = __atomic_load_n(&cached_pid, __ATOMIC_RELAXED);
    const struct object *o = object_of(from);
    if (o == NULL && pid > 0) {
        lock_objects();
        if ((o = object_of(from)) == NULL && nobjects < (int)(sizeof objects / sizeof *objects)) {
            dl_iterate_phdr(add_object, (void *)from);
            o = object_of(from);
        }
        unlock_objects();
    }
    if (pid > 0 && o && o->fork_check)
        return pid;
    return (pid_t)syscall(SYS_getpid);
}
