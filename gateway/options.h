/* options: sandgate's settings, from one table of options.
 *
 * Every option is one row of a table (options.c): its long name, an
 * optional short one, its argument's name, where its value goes and how it
 * is checked, and its help text.  That row alone makes the option work on
 * the command line (getopt_long), in the environment (SANDGATE_ and the
 * name upper-cased, '-' as '_'), in the config file ('name = value') and in
 * --help.  Adding an option is adding a row (and, when its value lands in a
 * new field, that field).
 */
#ifndef SG_OPTIONS_H
#define SG_OPTIONS_H

#include <stdbool.h>

#include "common/log.h"
#include "gateway/http/http.h"
#include "gateway/jupyter/jupyter.h"
#include "gateway/observe/observe.h"
#include "gateway/rest/rest.h"
#include "gateway/session/session.h"
#include "gateway/tenants/tenants.h"
#include "kernelmgr/manager/manager.h"

#define SETTINGS_MAX_TEMPLATES 32

typedef struct {
    char host[256];
    sg_loglevel_t level;
    bool no_auth;
    http_config_t http;
    api_config_t api;
    exec_policy_t exec; /* every front end's executions' limits */
    channels_config_t channels;
    kmgr_config_t k;
    unsigned uid; /* of the unprivileged half, when started as root */
    int launcher_timeout_ms;
    char *state_abs;          /* --state-dir made absolute, when it was not */
    char *config_text;        /* the config file's text; values point into it */
    char *token_arg;          /* --token's value, copied before argv is blanked */
    const char *replica;      /* --replica-id; NULL: the host name */
    int pause_on_stop_ms;     /* --pause-on-stop; 0: sessions are left running */
    const char *audit_log;    /* --audit-log; NULL: none */
    const char *keys_file;    /* --keys-file; NULL: one tenant, the token's */
    unsigned auth_fail_limit; /* failed authentications a minute per address; 0: any */
    int auth_block_ms;        /* how long an address past it is refused */
    tenants_config_t tenants; /* quotas of tenants whose line names none */
    audit_code_t audit_code;
    uint64_t audit_max_size;    /* --audit-max-size; 0: no rotation by size */
    unsigned audit_keep;        /* --audit-keep */
    int events_keep_ms;         /* --events-keep */
    int volume_mib;             /* --volume-size: a new volume's size when it names none */
    const char *peers;          /* --peers: the other replicas, "ID=HOST:PORT ..." */
    bool drain_on_stop;         /* --drain-on-stop: SIGTERM moves every context to a peer */
    const char *webhook;        /* --webhook URL; NULL: none */
    const char *webhook_secret; /* --webhook-secret */
    sandbox_template_t templates[SETTINGS_MAX_TEMPLATES]; /* --template */
    size_t ntemplates;
    char *template_text[SETTINGS_MAX_TEMPLATES * 7]; /* what templates' strings point into */
    size_t ntemplate_text;
    struct {
        char *name;
        int size;
    } pools[SETTINGS_MAX_TEMPLATES]; /* --pool-size NAME=N, applied once all are read */
    size_t npools;
    kmgr_pool_t lang_pools[SETTINGS_MAX_TEMPLATES]; /* the pools that are no template's */
    size_t nlang_pools;
} settings_t;

/* Fills s from the config file, the environment and argv, in that order,
 * each overriding what came before.  Returns -1 when the daemon should go
 * on, or the exit status when it should not: 0 after --help or --version
 * (printed on stdout), 2 after a usage error (printed on stderr, naming
 * where the bad value came from).  --token's value is blanked in argv.
 * Whatever the result, settings_free releases what s holds. */
int options_parse(settings_t *s, int argc, char **argv);

void settings_free(settings_t *s);

#endif
