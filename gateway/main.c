/* sandgate: the daemon's entry point — options, the event loop, shutdown. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"
#include "common/replica.h"
#include "common/xalloc.h"
#include <sodium.h>

#include "common/proc.h"
#include "config.h"
#include "gateway/auth/auth.h"
#include "gateway/cluster/cluster.h"
#include "gateway/envd/envd.h"
#include "gateway/events/events.h"
#include "gateway/http/http.h"
#include "gateway/jupyter/jupyter.h"
#include "gateway/mcp/mcp.h"
#include "gateway/observe/observe.h"
#include "gateway/options.h"
#include "gateway/ports/ports.h"
#include "gateway/rest/rest.h"
#include "gateway/secrets/secrets.h"
#include "gateway/session/session.h"
#include "gateway/tenants/tenants.h"
#include "gateway/volumes/volumes.h"
#include "kernelmgr/launcher/launcher.h"
#include "kernelmgr/manager/manager.h"

/* The front ends over one kernel manager, each registering its routes. */
typedef struct {
    const char *keys_file; /* --keys-file, or NULL */
    keys_t *keys;          /* its tenants */
    unsigned keys_owner;   /* besides root, the uid that may own it: sandgate's at start */
    kmgr_t *kmgr;
    http_server_t *http;
    api_t *api;
    jupyter_t *jupyter;
    mcp_t *mcp;
    envd_t *envd;
    ports_t *ports;
    events_t *events;
    volumes_t *volumes;
    cluster_t *cluster;
    secrets_t *secrets;
    unsigned char sealing_pk[crypto_box_PUBLICKEYBYTES]; /* read while still root */
} daemon_t;

/* SIGHUP: the keys file again.  A key added works from the next request, a
 * removed or rotated one fails from then on, and what it has open — streams,
 * suspended requests, WebSockets — is closed now (http_server_revoke);
 * sessions are not touched (they belong to their tenant's name, which a new
 * key for it keeps).  The old keys go at once: a request under way holds a
 * copy of its tenant.  A file that cannot be read or is wrong keeps the keys
 * in use. */
static void use_keys(daemon_t *d, keys_t *fresh, sg_error_t *err)
{
    if (!fresh) {
        log_error("SIGHUP: the keys in use are kept: %s", err->msg);
        sg_error_free(&err);
        return;
    }
    http_server_set_keys(d->http, fresh);
    tenants_set_keys(fresh);
    keys_destroy(&d->keys);
    d->keys = fresh;
    size_t revoked = http_server_revoke(d->http);
    log_info("SIGHUP: %s read again: %zu tenants; %zu requests of removed or rotated keys ended",
             d->keys_file, keys_count(fresh), revoked);
}

/* The launcher read the file (it keeps root; this process may not). */
static void on_keys_read(const char *text, unsigned mode, unsigned uid, const sg_error_t *err,
                         void *arg)
{
    daemon_t *d = arg;
    sg_error_t *e = NULL;
    keys_t *fresh = text ? keys_from_text(text, d->keys_file, mode, uid, d->keys_owner, &e) : NULL;
    if (!text)
        sg_error_set(&e, err ? err->kind : SG_E_INTERNAL, "%s", err ? err->msg : "no answer");
    use_keys(d, fresh, e);
}

static void reload_keys(daemon_t *d)
{
    if (!d->keys_file || !d->http)
        return;
    if (sandbox_has_launcher()) {
        sandbox_read_keys(on_keys_read, d);
        return;
    }
    sg_error_t *err = NULL;
    use_keys(d, keys_load(d->keys_file, &err), err);
}

/* What the kernel manager did on its own (an idle pause, a cull, a
 * re-adoption...): an audit event of no front end and no client. */
static void on_kmgr_notice(const char *event, json_t *fields, void *arg)
{
    (void)arg;
    audit_event(NULL, event, fields);
}

/* A stop: at once, or (--pause-on-stop) once every idle session is paused
 * to disk, a second signal or the time limit cutting that short. */
typedef struct {
    kmgr_t *kmgr;
    cluster_t *cluster; /* with --drain-on-stop: contexts move to peers first */
    int pause_ms;
    bool draining;
    int64_t drain_began; /* zclock_mono() of the first SIGTERM */
    loop_t *loop;
    bool launcher_lost; /* stopping for the supervisor: exit status 70 */
    int lost_grace_ms;  /* --launcher-timeout */
    int64_t lost_deadline;
} stop_t;

/* A drain lasts at least this long: GET /health answers 503 meanwhile, and
 * a proxy checking it every second takes the replica out (HAProxy's "fall
 * 2", docker/haproxy-config.sh) before its port closes under a request. */
#define DRAIN_MIN_MS 3000

static void on_drain_floor(loop_t *loop, int timer_id, void *arg)
{
    (void)timer_id;
    (void)arg;
    loop_stop(loop);
}

static void on_drained(void *arg)
{
    stop_t *st = arg;
    int64_t left = st->drain_began + DRAIN_MIN_MS - zclock_mono();
    log_info("every session that could pause is paused; stopping");
    if (left > 0)
        loop_timer(st->loop, (int)left, 1, on_drain_floor, NULL);
    else
        loop_stop(st->loop);
}

static void on_drain_timeout(loop_t *loop, int timer_id, void *arg)
{
    (void)timer_id;
    (void)arg;
    log_warn("--pause-on-stop: time is up; stopping with pauses still under way");
    loop_stop(loop);
}

static void pause_all(stop_t *st)
{
    if (st->pause_ms <= 0) {
        on_drained(st);
        return;
    }
    size_t n = kmgr_pause_all(st->kmgr, on_drained, st);
    if (n == 0) {
        on_drained(st);
        return;
    }
    log_info("pausing %zu sessions before stopping (at most %d s; a second signal stops now)", n,
             st->pause_ms / 1000);
    loop_timer(st->loop, st->pause_ms, 1, on_drain_timeout, NULL);
}

static void on_moved_away(const json_t *summary, void *arg)
{
    stop_t *st = arg;
    (void)summary;
    kmgr_set_draining(st->kmgr, false); /* stopping now */
    pause_all(st);                      /* what stayed */
}

static void on_stop_signal(loop_t *loop, int signo, void *arg)
{
    stop_t *st = arg;
    log_info("%s received", strsignal(signo));
    if ((st->pause_ms <= 0 && !st->cluster) || st->kmgr == NULL || st->draining) {
        loop_stop(loop);
        return;
    }
    st->draining = true;
    st->drain_began = zclock_mono();
    st->loop = loop;
    kmgr_set_stopping(st->kmgr);
    if (st->cluster)
        kmgr_set_draining(st->kmgr, true);
    if (!st->cluster || cluster_drain(st->cluster, on_moved_away, st) == 0) {
        kmgr_set_draining(st->kmgr, false);
        pause_all(st);
    }
}

/* SIGHUP: the audit log was rotated; write to a new file of the same name. */
static void on_hangup(loop_t *loop, int signo, void *arg)
{
    reload_keys(arg);
    sg_error_t *err = NULL;
    if (audit_reopen(&err) < 0) {
        log_warn("SIGHUP: %s", err->msg);
        sg_error_free(&err);
    } else if (audit_enabled()) {
        log_info("SIGHUP: the audit log was reopened");
    }
}

/* Stops once no execution runs, or at the deadline. */
static void on_lost_tick(loop_t *loop, int timer_id, void *arg)
{
    stop_t *st = arg;
    kmgr_stats_t ks;
    if (st->kmgr)
        kmgr_stats(st->kmgr, &ks);
    if (st->kmgr && ks.busy > 0 && zclock_mono() < st->lost_deadline)
        return;
    loop_timer_end(loop, timer_id);
    log_error("stopping with status 70 for the supervisor to restart sandgate (the launcher is "
              "gone); sessions keep running and are re-adopted");
    loop_stop(loop);
}

/* The launcher is gone and this process, without root, cannot start
 * another: stop, for the supervisor to restart sandgate, once the
 * executions under way have ended (at most the launcher timeout more).
 * Meanwhile what needs the launcher fails with 503 naming it. */
static void on_launcher_lost(void *arg)
{
    stop_t *st = arg;
    if (st->launcher_lost)
        return;
    st->launcher_lost = true;
    st->lost_deadline = zclock_mono() + st->lost_grace_ms;
    loop_timer(st->loop, 100, 0, on_lost_tick, st);
}

/* The token: none (--no-auth), the one given, or one generated into buf
 * (then true: it is shown to the operator once the daemon listens). */
static bool choose_token(settings_t *s, char buf[65])
{
    if (s->no_auth) {
        s->http.token = NULL;
        log_warn("--no-auth: anyone who can reach %s can run code here", s->host);
        return false;
    }
    if (s->http.token || s->keys_file) /* keys alone: no admin token */
        return false;
    unsigned char raw[24];
    randombytes_buf(raw, sizeof raw);
    sodium_bin2hex(buf, 65, raw, sizeof raw);
    s->http.token = buf;
    return true;
}

/* Privilege separation (kernelmgr/launcher/launcher.h): started as root with runsc,
 * fork the launcher now — before any socket or thread exists — and serve
 * HTTP without root.  The audit log is opened before privileges go, so its
 * directory may be root's; after the launcher's fork, so only the serving
 * half holds it.  A reopen (SIGHUP) happens as the serving uid:
 * docs/operations.md.  Returns the launcher's link (-1: none) in *link. */
static int separate(settings_t *s, int *link, pid_t *launcher_pid, sg_error_t **err)
{
    launcher_config_t lc = {.sandbox = s->k.sandbox,
                            .state_dir = s->k.state_dir,
                            .kernelspec_path = s->k.kernelspec_path,
                            .uid = s->uid,
                            .gid = SANDBOX_GID,
                            .keys_file = s->keys_file};
    *link = -1;
    bool privsep = geteuid() == 0 && s->k.sandbox.mode == SANDBOX_RUNSC;
    if ((privsep && (*link = launcher_fork(&lc, launcher_pid, err)) < 0) ||
        (s->audit_log && audit_open(s->audit_log, s->audit_code, err) < 0) ||
        (privsep && launcher_drop_privileges(&lc, err) < 0)) {
        if (*link >= 0) /* the launcher ends when its link closes */
            close(*link);
        *link = -1;
        return -1;
    }
    if (privsep)
        log_info("serving as uid %u, gid %u; the launcher (pid %d) keeps root for runsc and "
                 "workspaces",
                 lc.uid, lc.gid, (int)*launcher_pid);
    return 0;
}

/* Waits (at most 10 s) for the launcher to end once its link is closed. */
static void reap_launcher(int link, pid_t pid)
{
    if (link < 0)
        return;
    close(link);
    int i = 0;
    while (i++ < 100 && waitpid(pid, NULL, WNOHANG) == 0)
        usleep(100 * 1000);
    if (i > 100)
        log_warn("the launcher (pid %d) did not exit within 10 s", (int)pid);
}

static int daemon_start(daemon_t *d, loop_t *loop, settings_t *s, sg_error_t **err)
{
    /* The kernels' own defaults, for what sandgate runs in them itself. */
    s->k.kernel.exec_timeout_ms = s->exec.timeout_ms;
    s->k.kernel.interrupt_grace_ms = s->exec.interrupt_grace_ms;
    /* Every wake of a session and every snapshot asks the tenants' quotas. */
    s->k.kernel.wake_gate = tenant_wake_gate;
    s->k.snapshot_gate = tenant_admit_snapshot;
    if (pyscript_load(err) < 0 || !(d->kmgr = kmgr_new(loop, &s->k, err)) ||
        !(d->http = http_server_new(loop, &s->http, err)))
        return -1;
    tenants_attach(d->kmgr);
    s->api.state_dir = s->k.state_dir;
    s->api.exec = &s->exec;
    d->api = api_new(loop, d->kmgr, &s->api, http_server_wake, d->http);
    s->channels.exec = &s->exec;
    d->jupyter = jupyter_new(loop, d->kmgr, &s->channels, http_server_wake, d->http);
    jupyter_set_commands(d->jupyter, api_commands(d->api));
    mcp_config_t mc;
    mcp_config_defaults(&mc);
    mc.state_dir = s->k.state_dir;
    mc.kernelspec = s->k.pool_kernelspec;
    mc.idle_ms = s->k.cull_idle_ms;
    mc.exec = &s->exec;
    mc.max_upload = s->api.max_upload;
    mc.loopback_origins = s->http.token == NULL;
    mc.notebook_url = s->api.notebook_url;
    d->mcp = mcp_new(loop, d->kmgr, &mc, http_server_wake, d->http);
    envd_config_t ec = {.max_upload = s->api.max_upload};
    d->envd = envd_new(loop, d->kmgr, d->api, api_commands(d->api), &ec, http_server_wake, d->http);
    d->ports = ports_new(loop, d->kmgr, api_ports_public, d->api, http_server_wake, d->http);
    if (!(d->events = events_new(loop, d->kmgr, s->events_keep_ms, s->k.state_dir, s->webhook,
                                 s->webhook_secret, err)) ||
        !(d->volumes = volumes_new(loop, d->kmgr, s->k.state_dir, s->volume_mib, http_server_wake,
                                   d->http, err)))
        return -1;
    api_set_volumes(d->api, d->volumes);
    if (!(d->secrets = secrets_new(s->k.state_dir, d->sealing_pk, err)))
        return -1;
    api_network_secrets(secrets_known, d->secrets);
    secrets_on_change(d->secrets, api_network_secret_changed, d->api);
    if (!(d->cluster = cluster_new(loop, d->kmgr, d->api, s->k.state_dir, s->http.token, s->peers,
                                   http_server_wake, d->http, err)))
        return -1;
    /* The front ends' URLs are disjoint, so the order is free. */
    return api_register(d->api, d->http, err) < 0 || ports_register(d->ports, d->http, err) < 0 ||
                   events_register(d->events, d->http, err) < 0 ||
                   volumes_register(d->volumes, d->http, err) < 0 ||
                   secrets_register(d->secrets, d->http, err) < 0 ||
                   cluster_register(d->cluster, d->http, err) < 0 ||
                   jupyter_register(d->jupyter, d->http, err) < 0 ||
                   mcp_register(d->mcp, d->http, err) < 0 ||
                   envd_register(d->envd, d->http, err) < 0
               ? -1
               : 0;
}

static void daemon_stop(daemon_t *d)
{
    jupyter_close(d->jupyter);
    http_server_destroy(&d->http);
    envd_destroy(&d->envd);
    ports_destroy(&d->ports);
    events_destroy(&d->events);
    volumes_destroy(&d->volumes);
    secrets_destroy(&d->secrets);
    cluster_destroy(&d->cluster);
    mcp_destroy(&d->mcp);
    jupyter_destroy(&d->jupyter);
    api_destroy(&d->api);
    tenants_attach(NULL);
    kmgr_destroy(&d->kmgr, false);
    keys_destroy(&d->keys);
}

/* The loop with its signals: SIGINT and SIGTERM end it through its
 * signalfd; they are blocked before ZeroMQ starts its threads, which
 * inherit the mask (czmq's own handler is off). */
static loop_t *loop_start(stop_t *stop, daemon_t *d, sg_error_t **err)
{
    loop_t *loop = loop_new();
    if (loop_signal(loop, SIGINT, on_stop_signal, stop, err) < 0 ||
        loop_signal(loop, SIGTERM, on_stop_signal, stop, err) < 0 ||
        loop_signal(loop, SIGHUP, on_hangup, d, err) < 0 || proc_init(loop, err) < 0) {
        loop_destroy(&loop);
        return NULL;
    }
    zsys_handler_set(NULL);
    zsys_init();
    audit_attach(loop);
    return loop;
}

static void announce(const settings_t *s, const daemon_t *d, const char *token, bool show)
{
    log_info("sandgate %s listening on http://%s:%d (state in %s, sandbox %s, replica %s: ids "
             "begin %s)",
             PACKAGE_VERSION, s->host, http_server_port(d->http), s->k.state_dir,
             s->k.sandbox.mode == SANDBOX_RUNSC ? "runsc" : "none", replica_id(), replica_tag());
    if (!show)
        return;
    /* The token goes to stdout for the operator, never to the log. */
    printf("sandgate is ready. Token (generated; SANDGATE_TOKEN or a config file's token "
           "chooses one):\n  %s\n"
           "Try:\n  curl -sN http://%s:%d/execute -H 'Authorization: Bearer %s' "
           "-H 'Content-Type: application/json' -d '{\"code\": \"print(6*7)\"}'\n",
           token, s->host, http_server_port(d->http), token);
    fflush(stdout);
}

/* `sandgate drain [URL]`: the sandgate at URL (the default --listen's)
 * moves every context to its peers (POST /cluster/drain), asked as the
 * admin (SANDGATE_TOKEN, given to curl on its stdin, never on a command
 * line); prints what moved and what stayed. */
static int drain_main(int argc, char **argv)
{
    const char *token = getenv("SANDGATE_TOKEN");
    if (argc > 3 || (argc == 3 && strncmp(argv[2], "http", 4) != 0) || !token || !*token) {
        fprintf(stderr, "usage: SANDGATE_TOKEN=KEY sandgate drain [http://HOST:PORT]\n"
                        "moves every context of that sandgate to its --peers "
                        "(docs/deploy-cluster.md)\n");
        return 2;
    }
    cleanup_free char *url =
        xasprintf("%s/cluster/drain", argc == 3 ? argv[2] : "http://127.0.0.1:49999");
    int in[2];
    if (pipe(in) < 0)
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0);
        close(in[1]);
        execl("/usr/bin/curl", "curl", "-sS", "--fail-with-body", "-X", "POST", "-K", "-", url,
              (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    dprintf(in[1], "header = \"Authorization: Bearer %s\"\n", token);
    close(in[1]);
    int status = 1;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "keys") == 0)
        return keys_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "drain") == 0)
        return drain_main(argc, argv);
    settings_t s;
    int rc = options_parse(&s, argc, argv);
    if (rc >= 0) {
        settings_free(&s);
        return rc;
    }
    s.k.notice = on_kmgr_notice;
    sg_log_set_level(s.level);
    signal(SIGPIPE, SIG_IGN);
    if (s.k.sandbox.mode == SANDBOX_NONE)
        log_warn("*** --sandbox=none: kernels run as plain processes with sandgate's privileges. "
                 "Code can read and change this machine. For development only. ***");
    char generated[65];
    bool show_token = choose_token(&s, generated);

    sg_error_t *err = NULL;
    int link = -1;
    pid_t launcher_pid = 0;
    static stop_t stop;
    stop = (stop_t){.pause_ms = s.pause_on_stop_ms};
    daemon_t d = {0};
    loop_t *loop = NULL;
    rc = 1;
    /* The keys file is read before privileges go: it may be root's alone. */
    d.keys_file = s.keys_file;
    d.keys_owner = geteuid();
    if (s.keys_file && !(d.keys = keys_load(s.keys_file, &err)))
        goto out;
    s.http.keys = d.keys;
    tenants_set_keys(d.keys);
    tenants_configure(&s.tenants);
    s.http.auth_fail_limit = s.auth_fail_limit;
    s.http.auth_block_ms = s.auth_block_ms;
    audit_rotate_at(s.audit_max_size, s.audit_keep);
    /* The secrets' sealing key is root's when sandgate starts as root. */
    if (mkdir(s.k.state_dir, 0711) < 0 && errno != EEXIST)
        log_warn("cannot make %s: %s", s.k.state_dir, strerror(errno));
    if (replica_init(s.replica, &err) < 0 ||
        secrets_sealing_key(s.k.state_dir, d.sealing_pk, &err) < 0 ||
        separate(&s, &link, &launcher_pid, &err) < 0 || !(loop = loop_start(&stop, &d, &err)))
        goto out;
    if (link >= 0) {
        stop.loop = loop;
        stop.lost_grace_ms = s.launcher_timeout_ms;
        sandbox_set_launcher(loop, link, s.launcher_timeout_ms, on_launcher_lost, &stop);
    }
    if (daemon_start(&d, loop, &s, &err) < 0)
        goto out;
    stop.kmgr = d.kmgr;
    stop.cluster = s.drain_on_stop ? d.cluster : NULL;
    announce(&s, &d, generated, show_token);
    if (loop_run(loop, &err) < 0) {
        log_error("%s", err->msg);
        sg_error_free(&err);
    }
    log_info("shutting down; sandboxes keep running and are re-adopted at the next start");
    rc = stop.launcher_lost ? 70 : 0;
out:
    if (err) {
        log_error("%s", err->msg);
        sg_error_free(&err);
    }
    daemon_stop(&d);
    reap_launcher(link, launcher_pid);
    if (loop) {
        audit_close();
        proc_fini();
        loop_destroy(&loop);
    }
    settings_free(&s);
    return rc;
}
