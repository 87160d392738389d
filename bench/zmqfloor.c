/* zmqfloor: the least CPU a gateway on sandgate's stack spends per execute.
 *
 *   zmqfloor [-n EXCHANGES] [-w WARMUP] [-r RUNS] [-g US[,US,US,US,US]] [-p] [VARIANT...]
 *
 * Three processes per run; only the middle one is measured.
 *
 *   kernel   (fork, not measured) binds a ROUTER (shell) and a PUB (iopub) on
 *            ipc:// sockets in a temporary directory, as an unsandboxed
 *            kernel does, and answers every shell request the way ipykernel
 *            6.17 answers `1+1`: iopub status busy, execute_input,
 *            execute_result, then the shell execute_reply, then iopub status
 *            idle.  Frame counts and sizes are ipykernel's (a topic, the
 *            delimiter, a 64-hex signature and the four JSON frames: header
 *            ~210 bytes, parent header ~214, metadata, content), every
 *            message signed with HMAC-SHA256.  Before each of the five it
 *            pauses as ipykernel does (-g, us; default 2400,100,950,1800,100:
 *            the medians of ipykernel 6.17's messages for `1+1` on the
 *            machine this was written on, from the request to busy, busy to
 *            execute_input, to execute_result, to the reply, to idle), so
 *            that they reach the gateway as a real kernel's do: most of them
 *            one at a time.  -g N makes all five pauses N us.
 *   gateway  (fork, measured) one thread of its own plus libzmq's (the
 *            default context: one I/O thread and the reaper): a DEALER on
 *            shell, a SUB subscribed to everything on iopub, a loopback TCP
 *            listening socket, all in one epoll set (the ZMQ_FDs
 *            edge-triggered, each socket drained with ZMQ_DONTWAIT until
 *            EAGAIN, ZMQ_EVENTS checked after every send).  Per exchange: it
 *            reads an HTTP request, sends one execute_request (six frames) on
 *            the DEALER, receives until it holds the reply and the idle
 *            status of that request (matched by the parent msg_id, found
 *            with memmem; no JSON parsing, no allocation of its own), then
 *            writes one ~300-byte HTTP response with a single send.
 *   client   (fork, not measured) one keep-alive TCP connection: sends a
 *            request, reads the whole response, sends the next.
 *
 * The gateway's CPU is the sum of the first field of
 * /proc/self/task/<tid>/schedstat (ns on a CPU) over all its threads, read
 * after WARMUP exchanges and after EXCHANGES more; the third field, the times
 * a thread was scheduled in, counts wake-ups.  With -p (root), `perf stat -e
 * raw_syscalls:sys_enter` counts the gateway's system calls over the same
 * window; perf's tracepoint adds to the CPU measured, as it does for
 * bench/loopcost.py (whose --no-perf matches a run without -p).
 *
 * Variants (default: all), run in turn RUNS times so a drifting machine
 * biases none of them:
 *   floor      as above
 *   batched    the kernel sends its five messages back to back (no pauses)
 *   hmac       floor + libsodium HMAC-SHA256: the request signed, every
 *              received message verified (over its four JSON frames)
 *   sends5     floor, the response written as five sends (chunked header,
 *              three NDJSON chunks, the last chunk) instead of one
 *   pinned     floor, the loop and libzmq's threads on one CPU
 *              (sched_setaffinity, ZMQ_THREAD_AFFINITY_CPU_ADD)
 *   immediate  floor, ZMQ_IMMEDIATE=1 and ZMQ_SNDHWM/RCVHWM 0 on both sockets
 *   io2        floor, ZMQ_IO_THREADS=2
 *   http       the TCP half alone: request read, response written, no kernel
 *
 * Prints a Markdown table: median and range over RUNS of ms of gateway CPU
 * per exchange, wake-ups per exchange, system calls per exchange (-p), and
 * the exchange's mean wall time.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <glob.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>
#include <zmq.h>

typedef struct {
    const char *name, *what;
    bool batched;   /* no pauses: the five messages back to back */
    bool hmac;      /* the gateway signs and verifies */
    int sends;      /* sends per response: 1 or 5 */
    bool pinned;    /* one CPU for the gateway's threads */
    bool immediate; /* ZMQ_IMMEDIATE, HWM 0 */
    int io_threads; /* ZMQ_IO_THREADS */
    bool nokernel;  /* the http variant */
} variant_t;

static const variant_t variants[] = {
    {"floor", "DEALER + SUB, epoll, one send per response", false, false, 1, false, false, 1,
     false},
    {"batched", "floor, the kernel's 5 messages back to back", true, false, 1, false, false, 1,
     false},
    {"hmac", "floor + HMAC-SHA256 (sign 1, verify 5)", false, true, 1, false, false, 1, false},
    {"sends5", "floor, the response in 5 sends", false, false, 5, false, false, 1, false},
    {"pinned", "floor, all gateway threads on one CPU", false, false, 1, true, false, 1, false},
    {"immediate", "floor, ZMQ_IMMEDIATE=1, HWM 0", false, false, 1, false, true, 1, false},
    {"io2", "floor, ZMQ_IO_THREADS=2", false, false, 1, false, false, 2, false},
    {"http", "TCP only: no kernel, no libzmq", false, false, 1, false, false, 1, true},
};
enum { NVARIANTS = sizeof variants / sizeof variants[0] };

#define DELIM "<IDS|MSG>"
#define SESSION_K "86730ac5-1a93148a50121cac631cab01"
#define SESSION_C "f8852a4b-8ac8d779a3cd63b08241e102"
#define ENGINE "59e860d7-183f-4051-8a17-7908131b7b14"
#define MSGID_LEN 36
/* No run takes this long: a stuck one ends by SIGALRM in every process. */
#define WATCHDOG_S 300
#define IDLE "\"execution_state\": \"idle\""

static const unsigned char key[crypto_auth_hmacsha256_KEYBYTES] = "zmqfloor-zmqfloor-zmqfloor-key!";

/* The HTTP exchange: bench/loopcost.py's request and a response of the size
 * sandgate sends for `1+1` (one result line, the execution count, the end). */
static const char request_body[] = "{\"code\": \"1+1\", \"context_id\": "
                                   "\"0b7f9c39-4c55-4d2c-9f65-1f3c1b3e9a40\"}";
static char request[512];
static size_t request_len;
static const char *const response_parts[5] = {
    "HTTP/1.1 200 OK\r\nConnection: Keep-Alive\r\nTransfer-Encoding: chunked\r\n"
    "Content-Type: application/x-ndjson\r\nDate: Mon, 23 Nov 2026 12:00:00 GMT\r\n\r\n",
    "5b\r\n{\"type\": \"result\", \"text\": \"2\", \"is_main_result\": true, "
    "\"data\": {\"text/plain\": \"2\"}}\n\r\n",
    "3a\r\n{\"type\": \"number_of_executions\", \"execution_count\": 1}\n\r\n",
    "1e\r\n{\"type\": \"end_of_execution\"}\n\r\n",
    "0\r\n\r\n",
};
static char response[1024];
static size_t response_len;

static void die(const char *what)
{
    fprintf(stderr, "zmqfloor: %s: %s\n", what, strerror(errno));
    _exit(2);
}

static void zdie(const char *what)
{
    fprintf(stderr, "zmqfloor: %s: %s\n", what, zmq_strerror(zmq_errno()));
    _exit(2);
}

/* ---- the kernel (not measured) ---------------------------------------------- */

static void sign(char hex[65], zmq_msg_t *json)
{
    crypto_auth_hmacsha256_state st;
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_init(&st, key, sizeof key);
    for (int i = 0; i < 4; i++)
        crypto_auth_hmacsha256_update(&st, zmq_msg_data(&json[i]), zmq_msg_size(&json[i]));
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_bin2hex(hex, 65, mac, sizeof mac);
}

static void send_frame(void *s, const void *p, size_t n, bool more)
{
    if (zmq_send(s, p, n, more ? ZMQ_SNDMORE : 0) < 0)
        zdie("kernel send");
}

/* One Jupyter message: prefix frame (topic or routing id), the delimiter,
 * the signature, header, parent header, metadata, content. */
static void send_jmsg(void *s, zmq_msg_t *prefix, const char *type, unsigned seq, zmq_msg_t *parent,
                      const char *metadata, const char *content)
{
    char header[300], hex[65];
    int hn = snprintf(header, sizeof header,
                      "{\"msg_id\": \"" SESSION_K "_2057_%u\", \"msg_type\": \"%s\", \"username\": "
                      "\"username\", \"session\": \"" SESSION_K
                      "\", \"date\": \"2026-11-23T12:44:50.125345Z\", \"version\": \"5.3\"}",
                      seq, type);
    zmq_msg_t json[4];
    zmq_msg_init_size(&json[0], (size_t)hn);
    memcpy(zmq_msg_data(&json[0]), header, (size_t)hn);
    zmq_msg_init(&json[1]);
    zmq_msg_copy(&json[1], parent);
    zmq_msg_init_size(&json[2], strlen(metadata));
    memcpy(zmq_msg_data(&json[2]), metadata, strlen(metadata));
    zmq_msg_init_size(&json[3], strlen(content));
    memcpy(zmq_msg_data(&json[3]), content, strlen(content));
    sign(hex, json);
    send_frame(s, zmq_msg_data(prefix), zmq_msg_size(prefix), true);
    send_frame(s, DELIM, strlen(DELIM), true);
    send_frame(s, hex, 64, true);
    for (int i = 0; i < 4; i++)
        if (zmq_msg_send(&json[i], s, i < 3 ? ZMQ_SNDMORE : 0) < 0)
            zdie("kernel send");
}

static void pause_us(int us)
{
    if (us <= 0)
        return;
    struct timespec ts = {0, us * 1000L};
    nanosleep(&ts, NULL);
}

static void iopub(void *pub, const char *type, unsigned seq, zmq_msg_t *parent, const char *content)
{
    char topic[80];
    zmq_msg_t t;
    int n = snprintf(topic, sizeof topic, "kernel." ENGINE ".%s", type);
    zmq_msg_init_size(&t, (size_t)n);
    memcpy(zmq_msg_data(&t), topic, (size_t)n);
    send_jmsg(pub, &t, type, seq, parent, "{}", content);
    zmq_msg_close(&t);
}

static void kernel_main(const char *dir, const int gap[5])
{
    char ep[300];
    void *ctx = zmq_ctx_new();
    void *shell = zmq_socket(ctx, ZMQ_ROUTER), *pub = zmq_socket(ctx, ZMQ_XPUB);
    snprintf(ep, sizeof ep, "ipc://%s/shell", dir);
    if (zmq_bind(shell, ep) < 0)
        zdie("kernel bind shell");
    snprintf(ep, sizeof ep, "ipc://%s/iopub", dir);
    if (zmq_bind(pub, ep) < 0)
        zdie("kernel bind iopub");
    /* Serve nothing before the gateway's subscription arrived, so that no
     * iopub message of the first request is lost. */
    char sub[64];
    if (zmq_recv(pub, sub, sizeof sub, 0) < 0)
        zdie("kernel subscription");
    unsigned seq = 0, count = 0;
    for (;;) {
        zmq_msg_t f[16];
        int n = 0;
        for (;;) {
            zmq_msg_init(&f[n]);
            if (zmq_msg_recv(&f[n], shell, 0) < 0)
                zdie("kernel recv");
            n++;
            if (!zmq_msg_more(&f[n - 1]) || n == 16)
                break;
        }
        /* f[0] routing id, f[1] delimiter, f[2] signature, f[3] header */
        if (n < 7)
            continue;
        count++;
        char content[200];
        pause_us(gap[0]);
        snprintf(content, sizeof content, "{\"execution_state\": \"busy\"}");
        iopub(pub, "status", ++seq, &f[3], content);
        pause_us(gap[1]);
        snprintf(content, sizeof content, "{\"code\": \"1+1\", \"execution_count\": %u}", count);
        iopub(pub, "execute_input", ++seq, &f[3], content);
        pause_us(gap[2]);
        snprintf(content, sizeof content,
                 "{\"data\": {\"text/plain\": \"2\"}, \"metadata\": {}, \"execution_count\": %u}",
                 count);
        iopub(pub, "execute_result", ++seq, &f[3], content);
        pause_us(gap[3]);
        snprintf(content, sizeof content,
                 "{\"status\": \"ok\", \"execution_count\": %u, \"user_expressions\": {}, "
                 "\"payload\": []}",
                 count);
        send_jmsg(shell, &f[0], "execute_reply", ++seq, &f[3],
                  "{\"started\": \"2026-11-23T12:44:50.114996Z\", \"dependencies_met\": true, "
                  "\"engine\": \"" ENGINE "\", \"status\": \"ok\"}",
                  content);
        pause_us(gap[4]);
        iopub(pub, "status", ++seq, &f[3], "{\"execution_state\": \"idle\"}");
        for (int i = 0; i < n; i++)
            zmq_msg_close(&f[i]);
    }
}

/* ---- the client (not measured) ------------------------------------------------ */

static void client_main(int port, int total)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
        die("client connect");
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[4096];
    for (int i = 0; i < total; i++) {
        if (send(fd, request, request_len, 0) != (ssize_t)request_len)
            die("client send");
        size_t got = 0;
        while (got < response_len) {
            ssize_t r = recv(fd, buf, sizeof buf, 0);
            if (r <= 0)
                die("client recv");
            got += (size_t)r;
        }
    }
    close(fd);
}

/* ---- the gateway (measured) ------------------------------------------------------ */

typedef struct {
    uint64_t cpu_ns, wakeups, wall_ns;
    unsigned bad; /* messages whose signature did not verify */
} result_t;

static void schedstat(uint64_t *cpu, uint64_t *runs)
{
    glob_t g;
    *cpu = *runs = 0;
    if (glob("/proc/self/task/*/schedstat", 0, NULL, &g) != 0)
        return;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        FILE *f = fopen(g.gl_pathv[i], "r");
        unsigned long long c = 0, w = 0, r = 0;
        if (f && fscanf(f, "%llu %llu %llu", &c, &w, &r) == 3) {
            *cpu += c;
            *runs += r;
        }
        if (f)
            fclose(f);
    }
    globfree(&g);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct {
    const variant_t *v;
    void *dealer, *sub;
    char msg_id[MSGID_LEN + 1]; /* the request in flight */
    unsigned seq;
    bool got_reply, got_idle, busy;
    unsigned bad;
} gw_t;

/* Receives one whole message from s; 0 when none is waiting. */
static int recv_jmsg(gw_t *g, void *s, bool is_sub)
{
    zmq_msg_t f[12];
    int n = 0;
    for (;;) {
        zmq_msg_init(&f[n]);
        if (zmq_msg_recv(&f[n], s, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&f[n]);
            if (zmq_errno() == EAGAIN && n == 0)
                return 0;
            zdie("gateway recv");
        }
        n++;
        if (!zmq_msg_more(&f[n - 1]) || n == 12)
            break;
    }
    int d = -1;
    for (int i = 0; i < n && d < 0; i++)
        if (zmq_msg_size(&f[i]) == strlen(DELIM) && !memcmp(zmq_msg_data(&f[i]), DELIM, 9))
            d = i;
    if (d >= 0 && n >= d + 6) {
        if (g->v->hmac) {
            char hex[65];
            sign(hex, &f[d + 2]);
            if (zmq_msg_size(&f[d + 1]) != 64 || sodium_memcmp(hex, zmq_msg_data(&f[d + 1]), 64))
                g->bad++;
        }
        zmq_msg_t *parent = &f[d + 3], *content = &f[d + 5];
        bool ours = g->busy && memmem(zmq_msg_data(parent), zmq_msg_size(parent), g->msg_id,
                                      MSGID_LEN) != NULL;
        if (ours && !is_sub)
            g->got_reply = true;
        else if (ours &&
                 memmem(zmq_msg_data(content), zmq_msg_size(content), IDLE, sizeof IDLE - 1))
            g->got_idle = true;
    }
    for (int i = 0; i < n; i++)
        zmq_msg_close(&f[i]);
    return 1;
}

static void drain(gw_t *g, void *s, bool is_sub)
{
    while (recv_jmsg(g, s, is_sub))
        ;
}

static void gw_send_frame(void *s, const void *p, size_t n, bool more)
{
    if (zmq_send(s, p, n, more ? ZMQ_SNDMORE : 0) < 0)
        zdie("gateway send");
}

static void send_request(gw_t *g)
{
    char header[300], hex[65];
    g->seq++;
    snprintf(g->msg_id, sizeof g->msg_id, "%.8s-%027u", SESSION_C, g->seq);
    int hn = snprintf(header, sizeof header,
                      "{\"msg_id\": \"%s\", \"msg_type\": \"execute_request\", \"username\": "
                      "\"username\", \"session\": \"" SESSION_C
                      "\", \"date\": \"2026-11-23T12:44:50.113206Z\", \"version\": \"5.3\"}",
                      g->msg_id);
    static const char content[] =
        "{\"code\": \"1+1\", \"silent\": false, \"store_history\": true, \"user_expressions\": "
        "{}, \"allow_stdin\": false, \"stop_on_error\": true}";
    if (g->v->hmac) {
        crypto_auth_hmacsha256_state st;
        unsigned char mac[crypto_auth_hmacsha256_BYTES];
        crypto_auth_hmacsha256_init(&st, key, sizeof key);
        crypto_auth_hmacsha256_update(&st, (const unsigned char *)header, (size_t)hn);
        crypto_auth_hmacsha256_update(&st, (const unsigned char *)"{}{}", 4);
        crypto_auth_hmacsha256_update(&st, (const unsigned char *)content, sizeof content - 1);
        crypto_auth_hmacsha256_final(&st, mac);
        sodium_bin2hex(hex, sizeof hex, mac, sizeof mac);
    } else {
        memset(hex, '0', 64);
    }
    g->got_reply = g->got_idle = false;
    g->busy = true;
    gw_send_frame(g->dealer, DELIM, strlen(DELIM), true);
    gw_send_frame(g->dealer, hex, 64, true);
    gw_send_frame(g->dealer, header, (size_t)hn, true);
    gw_send_frame(g->dealer, "{}", 2, true);
    gw_send_frame(g->dealer, "{}", 2, true);
    gw_send_frame(g->dealer, content, sizeof content - 1, false);
}

static bool readable(void *s)
{
    int ev = 0;
    size_t sz = sizeof ev;
    if (zmq_getsockopt(s, ZMQ_EVENTS, &ev, &sz) < 0)
        zdie("ZMQ_EVENTS");
    return ev & ZMQ_POLLIN;
}

static void write_response(int cfd, int sends)
{
    if (sends == 1) {
        if (send(cfd, response, response_len, MSG_NOSIGNAL) != (ssize_t)response_len)
            die("gateway send");
        return;
    }
    for (int i = 0; i < 5; i++) {
        size_t n = strlen(response_parts[i]);
        if (send(cfd, response_parts[i], n, MSG_NOSIGNAL) != (ssize_t)n)
            die("gateway send");
    }
}

static void epoll_add(int efd, int fd, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.fd = fd};
    if (epoll_ctl(efd, EPOLL_CTL_ADD, fd, &ev) < 0)
        die("epoll_ctl");
}

static void gateway_main(const variant_t *v, int lfd, const char *dir, int n, int warm, int ctl_in,
                         int ctl_out)
{
    gw_t g = {.v = v};
    void *ctx = NULL;
    int zfd_dealer = -1, zfd_sub = -1;
    if (v->pinned) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(0, &set);
        if (sched_setaffinity(0, sizeof set, &set) < 0)
            die("sched_setaffinity");
    }
    if (!v->nokernel) {
        ctx = zmq_ctx_new();
        if (v->io_threads != 1)
            zmq_ctx_set(ctx, ZMQ_IO_THREADS, v->io_threads);
        if (v->pinned)
            zmq_ctx_set(ctx, ZMQ_THREAD_AFFINITY_CPU_ADD, 0);
        g.dealer = zmq_socket(ctx, ZMQ_DEALER);
        g.sub = zmq_socket(ctx, ZMQ_SUB);
        if (!g.dealer || !g.sub)
            zdie("zmq_socket");
        if (v->immediate) {
            int one = 1, zero = 0;
            zmq_setsockopt(g.dealer, ZMQ_IMMEDIATE, &one, sizeof one);
            void *both[2] = {g.dealer, g.sub};
            for (int i = 0; i < 2; i++) {
                zmq_setsockopt(both[i], ZMQ_SNDHWM, &zero, sizeof zero);
                zmq_setsockopt(both[i], ZMQ_RCVHWM, &zero, sizeof zero);
            }
        }
        zmq_setsockopt(g.sub, ZMQ_SUBSCRIBE, "", 0);
        char ep[300];
        snprintf(ep, sizeof ep, "ipc://%s/shell", dir);
        if (zmq_connect(g.dealer, ep) < 0)
            zdie("connect shell");
        snprintf(ep, sizeof ep, "ipc://%s/iopub", dir);
        if (zmq_connect(g.sub, ep) < 0)
            zdie("connect iopub");
        size_t sz = sizeof(int);
        zmq_getsockopt(g.dealer, ZMQ_FD, &zfd_dealer, &sz);
        zmq_getsockopt(g.sub, ZMQ_FD, &zfd_sub, &sz);
    }
    int efd = epoll_create1(EPOLL_CLOEXEC), cfd = -1;
    if (efd < 0)
        die("epoll_create1");
    epoll_add(efd, lfd, EPOLLIN);
    if (zfd_dealer >= 0) {
        epoll_add(efd, zfd_dealer, EPOLLIN | EPOLLET);
        epoll_add(efd, zfd_sub, EPOLLIN | EPOLLET);
    }
    char req[2048];
    size_t req_len = 0;
    int done = 0;
    uint64_t cpu0 = 0, runs0 = 0, t0 = 0;
    bool responded = false;
    while (done < warm + n) {
        struct epoll_event evs[8];
        int k = epoll_wait(efd, evs, 8, -1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            die("epoll_wait");
        for (int i = 0; i < k; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd < 0)
                    die("accept");
                int one = 1;
                setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                epoll_add(efd, cfd, EPOLLIN);
            } else if (fd == cfd) {
                for (;;) {
                    ssize_t r = recv(cfd, req + req_len, sizeof req - req_len, 0);
                    if (r > 0) {
                        req_len += (size_t)r;
                        continue;
                    }
                    if (r == 0)
                        die("client closed early");
                    if (errno == EAGAIN)
                        break;
                    die("gateway recv");
                }
                /* A whole request: its header, and as many body bytes as
                 * Content-Length says. */
                const char *end = memmem(req, req_len, "\r\n\r\n", 4);
                const char *cl = memmem(req, req_len, "Content-Length: ", 16);
                if (!end || !cl)
                    continue;
                size_t body = strtoul(cl + 16, NULL, 10);
                if ((size_t)(end + 4 - req) + body > req_len)
                    continue;
                req_len = 0;
                if (v->nokernel) {
                    g.got_reply = g.got_idle = true;
                } else {
                    send_request(&g);
                    if (readable(g.dealer))
                        drain(&g, g.dealer, false);
                }
            } else if (fd == zfd_dealer) {
                drain(&g, g.dealer, false);
            } else if (fd == zfd_sub) {
                drain(&g, g.sub, true);
            }
        }
        if (g.got_reply && g.got_idle) {
            g.got_reply = g.got_idle = g.busy = false;
            write_response(cfd, v->sends);
            done++;
            responded = true;
        }
        if (responded && done == warm) {
            /* The window starts here: tell the parent (perf attaches), wait
             * for its go. */
            char c = 'r';
            if (write(ctl_out, &c, 1) != 1 || read(ctl_in, &c, 1) != 1)
                die("gateway control");
            schedstat(&cpu0, &runs0);
            t0 = now_ns();
        }
        responded = false;
    }
    result_t res;
    uint64_t cpu1, runs1;
    schedstat(&cpu1, &runs1);
    res.wall_ns = now_ns() - t0;
    res.cpu_ns = cpu1 - cpu0;
    res.wakeups = runs1 - runs0;
    res.bad = g.bad;
    if (write(ctl_out, &res, sizeof res) != sizeof res)
        die("gateway result");
    char c;
    if (read(ctl_in, &c, 1) < 0)
        die("gateway control");
    if (ctx) {
        int zero = 0;
        zmq_setsockopt(g.dealer, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(g.sub, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(g.dealer);
        zmq_close(g.sub);
        zmq_ctx_term(ctx);
    }
}

/* ---- the parent --------------------------------------------------------------------- */

typedef struct {
    double cpu_ms, wakeups, syscalls, wall_ms;
} sample_t;

static pid_t start_perf(pid_t pid, int *err_fd)
{
    int p[2];
    if (pipe(p) < 0)
        die("pipe");
    pid_t perf = fork();
    if (perf == 0) {
        char spid[16];
        snprintf(spid, sizeof spid, "%d", (int)pid);
        dup2(p[1], 2);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execlp("perf", "perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-p", spid,
               (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    *err_fd = p[0];
    return perf;
}

static double stop_perf(pid_t perf, int err_fd)
{
    kill(perf, SIGINT);
    char buf[4096];
    size_t len = 0;
    ssize_t r;
    while (len < sizeof buf - 1 && (r = read(err_fd, buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)r;
    buf[len] = 0;
    close(err_fd);
    waitpid(perf, NULL, 0);
    /* "COUNT,,raw_syscalls:sys_enter,..." */
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
        if (strstr(line, "raw_syscalls:sys_enter"))
            return strtod(line, NULL);
    return -1;
}

static sample_t run_once(const variant_t *v, int n, int warm, const int gap[5], bool perf)
{
    char dir[] = "/tmp/zmqfloor.XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp");
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 4) < 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &al) < 0)
        die("listen");
    int port = ntohs(a.sin_port);

    pid_t kernel = -1;
    alarm(WATCHDOG_S);
    if (!v->nokernel) {
        kernel = fork();
        if (kernel == 0) {
            alarm(WATCHDOG_S);
            close(lfd);
            static const int none[5];
            kernel_main(dir, v->batched ? none : gap);
            _exit(0);
        }
    }
    int to_gw[2], from_gw[2];
    if (pipe(to_gw) < 0 || pipe(from_gw) < 0)
        die("pipe");
    pid_t gw = fork();
    if (gw == 0) {
        alarm(WATCHDOG_S);
        close(to_gw[1]);
        close(from_gw[0]);
        gateway_main(v, lfd, dir, n, warm, to_gw[0], from_gw[1]);
        _exit(0);
    }
    close(to_gw[0]);
    close(from_gw[1]);
    pid_t client = fork();
    if (client == 0) {
        alarm(WATCHDOG_S);
        close(lfd);
        close(to_gw[1]);
        close(from_gw[0]);
        client_main(port, warm + n);
        _exit(0);
    }
    close(lfd);

    char c;
    if (read(from_gw[0], &c, 1) != 1) {
        fprintf(stderr, "zmqfloor: %s: the gateway failed\n", v->name);
        exit(2);
    }
    pid_t perf_pid = -1;
    int perf_fd = -1;
    if (perf) {
        perf_pid = start_perf(gw, &perf_fd);
        struct timespec ts = {0, 300 * 1000000L}; /* perf attaches */
        nanosleep(&ts, NULL);
    }
    c = 'g';
    if (write(to_gw[1], &c, 1) != 1)
        die("control");
    result_t res;
    if (read(from_gw[0], &res, sizeof res) != sizeof res) {
        fprintf(stderr, "zmqfloor: %s: the gateway failed\n", v->name);
        exit(2);
    }
    sample_t s = {res.cpu_ns / 1e6 / n, (double)res.wakeups / n, -1, res.wall_ns / 1e6 / n};
    if (perf)
        s.syscalls = stop_perf(perf_pid, perf_fd) / n;
    if (res.bad)
        fprintf(stderr, "zmqfloor: %s: %u messages failed verification\n", v->name, res.bad);
    if (write(to_gw[1], &c, 1) != 1)
        die("control");
    close(to_gw[1]);
    close(from_gw[0]);
    int st;
    waitpid(client, &st, 0);
    waitpid(gw, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "zmqfloor: %s: the gateway exited badly\n", v->name);
        exit(2);
    }
    if (kernel > 0) {
        kill(kernel, SIGKILL);
        waitpid(kernel, NULL, 0);
    }
    char path[300];
    snprintf(path, sizeof path, "%s/shell", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/iopub", dir);
    unlink(path);
    rmdir(dir);
    return s;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: zmqfloor [-n EXCHANGES] [-w WARMUP] [-r RUNS] [-g US[,US,US,US,US]] [-p] "
            "[VARIANT...]\nvariants:");
    for (int i = 0; i < NVARIANTS; i++)
        fprintf(stderr, " %s", variants[i].name);
    fprintf(stderr, "\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int n = 2000, warm = 200, runs = 3, opt;
    int gap[5] = {2400, 100, 950, 1800, 100};
    bool perf = false;
    while ((opt = getopt(argc, argv, "n:w:r:g:ph")) != -1) {
        switch (opt) {
        case 'n': n = atoi(optarg); break;
        case 'w': warm = atoi(optarg); break;
        case 'r': runs = atoi(optarg); break;
        case 'g': {
            /* one value for all five pauses, or five */
            char *p = optarg;
            int k = 0;
            while (k < 5) {
                gap[k++] = (int)strtol(p, &p, 10);
                if (*p != ',')
                    break;
                p++;
            }
            if (*p || (k != 1 && k != 5))
                usage();
            for (int i = k; i < 5; i++)
                gap[i] = gap[0];
            break;
        }
        case 'p': perf = true; break;
        default: usage();
        }
    }
    if (n < 1 || warm < 1 || runs < 1 || gap[0] < 0 || gap[1] < 0 || gap[2] < 0 || gap[3] < 0 ||
        gap[4] < 0)
        usage();
    const variant_t *chosen[NVARIANTS];
    int nv = 0;
    for (int i = optind; i < argc; i++) {
        int j = 0;
        while (j < NVARIANTS && strcmp(variants[j].name, argv[i]) != 0)
            j++;
        if (j == NVARIANTS || nv == NVARIANTS)
            usage();
        chosen[nv++] = &variants[j];
    }
    if (nv == 0)
        for (nv = 0; nv < NVARIANTS; nv++)
            chosen[nv] = &variants[nv];
    if (sodium_init() < 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    request_len =
        (size_t)snprintf(request, sizeof request,
                         "POST /execute HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Accept-Encoding: identity\r\n"
                         "Authorization: Bearer zmqfloor-token\r\n"
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                         strlen(request_body), request_body);
    for (int i = 0; i < 5; i++) {
        size_t l = strlen(response_parts[i]);
        memcpy(response + response_len, response_parts[i], l);
        response_len += l;
    }

    sample_t(*s)[NVARIANTS] = calloc((size_t)runs, sizeof *s);
    if (!s)
        return 2;
    for (int r = 0; r < runs; r++)
        for (int i = 0; i < nv; i++) {
            s[r][i] = run_once(chosen[i], n, warm, gap, perf);
            fprintf(stderr, "zmqfloor: run %d %-9s %.4f ms CPU, %.2f wake-ups / exchange\n", r + 1,
                    chosen[i]->name, s[r][i].cpu_ms, s[r][i].wakeups);
        }

    printf("zmqfloor: %d exchanges after %d warm-up, %d runs, kernel pauses %d,%d,%d,%d,%d us, "
           "libzmq %d.%d.%d, "
           "response %zu bytes, request %zu bytes%s\n\n",
           n, warm, runs, gap[0], gap[1], gap[2], gap[3], gap[4], ZMQ_VERSION_MAJOR,
           ZMQ_VERSION_MINOR, ZMQ_VERSION_PATCH, response_len, request_len,
           perf ? ", perf stat attached" : "");
    printf("| variant | what | CPU ms / exchange, median (min-max) | wake-ups / exchange | "
           "syscalls / exchange | wall ms / exchange |\n");
    printf("|---|---|---|---|---|---|\n");
    double *col = calloc((size_t)runs, sizeof *col);
    for (int i = 0; i < nv; i++) {
        double cpu, lo, hi, wk, sc, wall;
        for (int r = 0; r < runs; r++)
            col[r] = s[r][i].cpu_ms;
        cpu = median(col, runs);
        lo = col[0];
        hi = col[runs - 1];
        for (int r = 0; r < runs; r++)
            col[r] = s[r][i].wakeups;
        wk = median(col, runs);
        for (int r = 0; r < runs; r++)
            col[r] = s[r][i].syscalls;
        sc = median(col, runs);
        for (int r = 0; r < runs; r++)
            col[r] = s[r][i].wall_ms;
        wall = median(col, runs);
        char scs[32] = "-";
        if (perf)
            snprintf(scs, sizeof scs, "%.1f", sc);
        const variant_t *v = chosen[i];
        printf("| %s | %s | %.3f (%.3f-%.3f) | %.1f | %s | %.2f |\n", v->name, v->what, cpu, lo, hi,
               wk, scs, wall);
    }
    free(col);
    free(s);
    return 0;
}
