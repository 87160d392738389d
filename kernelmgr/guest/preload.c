/* sandgate-preload.so: loaded into every process of a gVisor sandbox
 * (LD_PRELOAD) to paper over system calls the packaged runsc rejects, and
 * into kernels that speak TCP only (also without a sandbox) to give them
 * Unix sockets (at the end).
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
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
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

/* Kernels that speak TCP only (Deno's: it ignores a connection file's "ipc"
 * transport) get SANDGATE_TCP_AS_IPC=PREFIX, the connection's ipc prefix
 * (a path, or '@' and a name in the abstract namespace), and a connection
 * file on 127.0.0.1.  A stream socket bound or connected to 127.0.0.1:PORT
 * then becomes a Unix socket at PREFIX-PORT, where ZeroMQ's ipc transport
 * names it: the kernel holds no TCP socket, which runsc could not
 * checkpoint ("endpoint still has waiters upon save"), and sandgate reaches
 * it the way it reaches every kernel.  The addresses such a socket reports
 * (accept, getsockname, getpeername) are 127.0.0.1's, which is what the
 * kernel's runtime expects of a TCP socket; TCP options on it succeed
 * without effect.  Read once at start and removed from the environment, so
 * that what the kernel runs does not inherit it. */

static char ipc_prefix[96];
static size_t ipc_prefix_len;

__attribute__((constructor)) static void tcp_as_ipc_init(void)
{
    const char *p = getenv("SANDGATE_TCP_AS_IPC");
    if (p && *p && strlen(p) < sizeof ipc_prefix) {
        strcpy(ipc_prefix, p);
        ipc_prefix_len = strlen(p);
    }
    unsetenv("SANDGATE_TCP_AS_IPC");
}

#define REAL(name, type)                                                                           \
    static type *real_##name;                                                                      \
    if (real_##name == NULL)                                                                       \
        real_##name = (type *)dlsym(RTLD_NEXT, #name);                                             \
    if (real_##name == NULL) {                                                                     \
        errno = ENOSYS;                                                                            \
        return -1;                                                                                 \
    }

/* The loopback port an AF_INET address names, or 0. */
static int loopback_port(const struct sockaddr *sa, socklen_t len)
{
    if (ipc_prefix_len == 0 || sa == NULL || len < (socklen_t)sizeof(struct sockaddr_in) ||
        sa->sa_family != AF_INET)
        return 0;
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    return in->sin_addr.s_addr == htonl(INADDR_LOOPBACK) ? ntohs(in->sin_port) : 0;
}

static socklen_t ipc_address(int port, struct sockaddr_un *un)
{
    memset(un, 0, sizeof *un);
    un->sun_family = AF_UNIX;
    int n = snprintf(un->sun_path, sizeof un->sun_path, "%s-%d", ipc_prefix, port);
    if (un->sun_path[0] == '@') {
        un->sun_path[0] = '\0';
        return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n);
    }
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + 1);
}

/* The port of a Unix address under the prefix, or 0. */
static int ipc_port(const struct sockaddr_un *un, socklen_t len)
{
    size_t n = len > offsetof(struct sockaddr_un, sun_path)
                   ? len - offsetof(struct sockaddr_un, sun_path)
                   : 0;
    char path[sizeof un->sun_path + 1];
    if (un->sun_family != AF_UNIX || n == 0 || n > sizeof un->sun_path)
        return 0;
    memcpy(path, un->sun_path, n);
    path[n] = '\0';
    if (path[0] == '\0')
        path[0] = '@';
    if (strncmp(path, ipc_prefix, ipc_prefix_len) != 0 || path[ipc_prefix_len] != '-')
        return 0;
    return atoi(path + ipc_prefix_len + 1);
}

/* fd, an AF_INET stream socket, becomes an AF_UNIX one with its flags: 0;
 * -1 when it is not a stream socket (left alone). */
static int make_unix(int fd)
{
    int type = 0;
    socklen_t tl = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM)
        return -1;
    int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
    int u = socket(AF_UNIX,
                   SOCK_STREAM | (fl >= 0 && (fl & O_NONBLOCK) ? SOCK_NONBLOCK : 0) |
                       (fdfl >= 0 && (fdfl & FD_CLOEXEC) ? SOCK_CLOEXEC : 0),
                   0);
    if (u < 0)
        return -1;
    int r = dup3(u, fd, fdfl >= 0 && (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0);
    close(u);
    return r < 0 ? -1 : 0;
}

typedef int(addr_fn)(int, const struct sockaddr *, socklen_t);
typedef int(name_fn)(int, struct sockaddr *, socklen_t *);
typedef int(accept4_fn)(int, struct sockaddr *, socklen_t *, int);
typedef int(setsockopt_fn)(int, int, int, const void *, socklen_t);

static int as_ipc(addr_fn *real, int fd, const struct sockaddr *sa, socklen_t len)
{
    int port = loopback_port(sa, len);
    struct sockaddr_un un;
    if (port > 0 && make_unix(fd) == 0)
        return real(fd, (struct sockaddr *)&un, ipc_address(port, &un));
    return real(fd, sa, len);
}

int bind(int fd, const struct sockaddr *sa, socklen_t len)
{
    REAL(bind, addr_fn);
    return as_ipc(real_bind, fd, sa, len);
}

int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
    REAL(connect, addr_fn);
    return as_ipc(real_connect, fd, sa, len);
}

/* Gives 127.0.0.1:port in sa (as much as *len holds). */
static void loopback_name(struct sockaddr *sa, socklen_t *len, int port)
{
    struct sockaddr_in in = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (sa && len) {
        memcpy(sa, &in, *len < (socklen_t)sizeof in ? *len : sizeof in);
        *len = sizeof in;
    }
}

/* The port of fd's own Unix name under the prefix (an accepted socket's is
 * its listener's), or 0. */
static int socket_port(int fd)
{
    static name_fn *real;
    if (real == NULL)
        real = (name_fn *)dlsym(RTLD_NEXT, "getsockname");
    struct sockaddr_un un;
    socklen_t len = sizeof un;
    if (ipc_prefix_len == 0 || real == NULL || real(fd, (struct sockaddr *)&un, &len) < 0)
        return 0;
    return ipc_port(&un, len);
}

static int named(name_fn *real, int fd, struct sockaddr *sa, socklen_t *len)
{
    int r = real(fd, sa, len);
    int port =
        r == 0 && sa && len && *len >= (socklen_t)sizeof(sa_family_t) && sa->sa_family == AF_UNIX
            ? socket_port(fd)
            : 0;
    if (port > 0)
        loopback_name(sa, len, port);
    return r;
}

int getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
    REAL(getsockname, name_fn);
    return named(real_getsockname, fd, sa, len);
}

/* A peer's port is made up, one per connection (its descriptor's number
 * above 32768): a runtime may tell its peers apart by their addresses. */
static int peer_port(int fd)
{
    return 32768 + fd % 32768;
}

int getpeername(int fd, struct sockaddr *sa, socklen_t *len)
{
    REAL(getpeername, name_fn);
    int r = real_getpeername(fd, sa, len);
    if (r == 0 && sa && len && *len >= (socklen_t)sizeof(sa_family_t) && sa->sa_family == AF_UNIX &&
        socket_port(fd) > 0)
        loopback_name(sa, len, peer_port(fd));
    return r;
}

int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
    REAL(accept4, accept4_fn);
    int port = ipc_prefix_len && sa && len ? socket_port(fd) : 0;
    if (port == 0)
        return real_accept4(fd, sa, len, flags);
    int r = real_accept4(fd, NULL, NULL, flags);
    if (r >= 0)
        loopback_name(sa, len, peer_port(r));
    return r;
}

int accept(int fd, struct sockaddr *sa, socklen_t *len)
{
    return accept4(fd, sa, len, 0);
}

int setsockopt(int fd, int level, int name, const void *value, socklen_t len)
{
    REAL(setsockopt, setsockopt_fn);
    int r = real_setsockopt(fd, level, name, value, len);
    if (r < 0 && level == IPPROTO_TCP && socket_port(fd) > 0)
        return 0;
    return r;
}
