/* sandgate: the daemon's entry point — options, the event loop, shutdown. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "config.h"
#include "gateway/http.h"

static const char usage[] =
    "usage: sandgate [OPTIONS]\n"
    "\n"
    "Runs untrusted code statefully in per-session Jupyter kernels inside gVisor\n"
    "sandboxes, and serves it over HTTP.\n"
    "\n"
    "Options (each also read from the environment variable shown):\n"
    "  -l, --listen HOST:PORT   address to serve HTTP on   [SANDGATE_LISTEN]\n"
    "                           (default 127.0.0.1:49999)\n"
    "      --log-level LEVEL    debug, info, warn or error [SANDGATE_LOG_LEVEL]\n"
    "                           (default info)\n"
    "  -h, --help               show this help and exit\n"
    "  -V, --version            show the version and exit\n"
    "\n"
    "Endpoints: GET /health\n";

static int parse_listen(const char *arg, char *host, size_t hostlen, int *port)
{
    const char *colon = strrchr(arg, ':');
    if (colon == NULL || (size_t)(colon - arg) >= hostlen)
        return -1;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end != 0 || p < 0 || p > 65535 || colon[1] == 0)
        return -1;
    memcpy(host, arg, colon - arg);
    host[colon - arg] = 0;
    *port = (int)p;
    return 0;
}

static int parse_level(const char *s, sg_loglevel_t *out)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (sg_loglevel_t)i;
            return 0;
        }
    return -1;
}

int main(int argc, char **argv)
{
    const char *listen = getenv("SANDGATE_LISTEN") ? getenv("SANDGATE_LISTEN") : "127.0.0.1:49999";
    const char *level = getenv("SANDGATE_LOG_LEVEL") ? getenv("SANDGATE_LOG_LEVEL") : "info";
    static const struct option opts[] = {{"listen", required_argument, NULL, 'l'},
                                         {"log-level", required_argument, NULL, 'L'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "l:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'l': listen = optarg; break;
        case 'L': level = optarg; break;
        case 'h': fputs(usage, stdout); return 0;
        case 'V': printf("sandgate %s\n", PACKAGE_VERSION); return 0;
        default: fputs("Try 'sandgate --help'.\n", stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sandgate: unexpected argument '%s'\nTry 'sandgate --help'.\n",
                argv[optind]);
        return 2;
    }
    char host[256];
    int port;
    sg_loglevel_t lvl;
    if (parse_listen(listen, host, sizeof host, &port) < 0) {
        fprintf(stderr, "sandgate: --listen wants HOST:PORT, got '%s'\n", listen);
        return 2;
    }
    if (parse_level(level, &lvl) < 0) {
        fprintf(stderr, "sandgate: --log-level wants debug, info, warn or error, got '%s'\n",
                level);
        return 2;
    }
    sg_log_set_level(lvl);
    signal(SIGPIPE, SIG_IGN);

    /* czmq turns SIGINT/SIGTERM into zsys_interrupted, which ends zloop_start. */
    zsys_init();
    zloop_t *loop = zloop_new();
    sg_error_t *err = NULL;
    http_server_t *http = http_server_new(loop, host, port, &err);
    if (http == NULL) {
        log_error("%s", err->msg);
        sg_error_free(&err);
        zloop_destroy(&loop);
        return 1;
    }
    log_info("sandgate %s listening on http://%s:%d", PACKAGE_VERSION, host,
             http_server_port(http));
    zloop_start(loop);
    log_info("shutting down");
    http_server_destroy(&http);
    zloop_destroy(&loop);
    return 0;
}
