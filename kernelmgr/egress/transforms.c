/* transforms: a sandbox's header transforms (E2B's network "rules"), checked
 * and, in the launcher, with their ${e2b.secrets.NAME} placeholders opened
 * for the egress proxy (egress.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sodium.h>

#include "common/xalloc.h"
#include "kernelmgr/egress/internal.h"

#define PLACEHOLDER "${e2b.secrets."
#define VALUE_MAX 8192
#define HEADERS_MAX 16
#define HOSTS_MAX 32

static const char token[] = "!#$%&'*+-.^_`|~0123456789"
                            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/* The secret name of the placeholder at p ("${e2b.secrets.NAME}"), its
 * length in *len; 0 if p starts none. */
static size_t placeholder(const char *p, size_t *name_len)
{
    if (strncmp(p, PLACEHOLDER, sizeof PLACEHOLDER - 1) != 0)
        return 0;
    const char *name = p + sizeof PLACEHOLDER - 1;
    size_t n = strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
    if (n == 0 || n > 128 || name[n] != '}')
        return 0;
    *name_len = n;
    return sizeof PLACEHOLDER - 1 + n + 1;
}

static int check_value(const char *host, const char *header, const char *v, sg_error_t **err)
{
    if (strlen(v) > VALUE_MAX)
        return sg_error_set(err, SG_E_INVALID, "rules.%s: header %s: longer than %d bytes", host,
                            header, VALUE_MAX);
    for (const char *p = v; *p; p++) {
        size_t n;
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return sg_error_set(err, SG_E_INVALID,
                                "rules.%s: header %s: a control character in its value", host,
                                header);
        if (p[0] == '$' && p[1] == '{') {
            size_t len = placeholder(p, &n);
            if (len == 0)
                return sg_error_set(
                    err, SG_E_INVALID,
                    "rules.%s: header %s: '%.40s' is not a placeholder sandgate resolves "
                    "(${e2b.secrets.NAME}; workload-identity tokens are not supported)",
                    host, header, p);
            p += len - 1;
        }
    }
    return 0;
}

int egress_check_transforms(const char *transforms, sg_error_t **err)
{
    if (transforms == NULL || !*transforms)
        return 0;
    json_error_t je;
    json_t *t = json_loads(transforms, 0, &je);
    int hosts = 0;
    const char *host, *header;
    json_t *headers, *v;
    if (!json_is_object(t) || json_object_size(t) > HOSTS_MAX) {
        json_decref(t);
        return sg_error_set(err, SG_E_INVALID, "rules must be an object of at most %d host names",
                            HOSTS_MAX);
    }
    json_object_foreach (t, host, headers) {
        if (!egress_name_ok(host, host + strlen(host)) || !json_is_object(headers) ||
            json_object_size(headers) > HEADERS_MAX) {
            sg_error_set(err, SG_E_INVALID,
                         "rules: '%.64s' must be a host name (api.example.com, *.example.com) "
                         "with at most %d headers",
                         host, HEADERS_MAX);
            break;
        }
        json_object_foreach (headers, header, v) {
            size_t n = strlen(header);
            if (n == 0 || n > 128 || strspn(header, token) != n || !json_is_string(v)) {
                sg_error_set(err, SG_E_INVALID,
                             "rules.%s: '%.64s' must be a header name with a string value", host,
                             header);
                break;
            }
            if (check_value(host, header, json_string_value(v), err) < 0)
                break;
        }
        if (err && *err)
            break;
        hosts++;
    }
    json_decref(t);
    return err && *err ? -1 : hosts;
}

/* The value of tenant's secret name (case does not matter), opened with
 * the sealing key; NULL if there is none. */
static char *secret(const char *state_dir, const char *tenant, const char *name, size_t name_len)
{
    cleanup_free char *path = xasprintf("%s/secrets/secrets.json", state_dir);
    cleanup_free char *key_path = xasprintf("%s/sealing/key", state_dir);
    json_t *all = json_load_file(path, 0, NULL), *s;
    size_t i;
    char *value = NULL;
    json_array_foreach (all, i, s) {
        const char *n = json_string_value(json_object_get(s, "name"));
        const char *owner = json_string_value(json_object_get(s, "tenant"));
        const char *sealed = json_string_value(json_object_get(s, "sealed"));
        if (!n || !owner || !sealed || strcmp(owner, tenant) != 0 || strlen(n) != name_len ||
            strncasecmp(n, name, name_len) != 0)
            continue;
        unsigned char pair[crypto_box_PUBLICKEYBYTES + crypto_box_SECRETKEYBYTES];
        FILE *f = fopen(key_path, "re");
        size_t got = f ? fread(pair, 1, sizeof pair, f) : 0;
        if (f)
            fclose(f);
        size_t cap = strlen(sealed), len = 0;
        unsigned char *box = xmalloc(cap + 1);
        if (got == sizeof pair &&
            sodium_base642bin(box, cap, sealed, cap, NULL, &len, NULL,
                              sodium_base64_VARIANT_ORIGINAL) == 0 &&
            len >= crypto_box_SEALBYTES) {
            value = xmalloc(len - crypto_box_SEALBYTES + 1);
            if (crypto_box_seal_open((unsigned char *)value, box, len, pair,
                                     pair + crypto_box_PUBLICKEYBYTES) == 0) {
                value[len - crypto_box_SEALBYTES] = 0;
            } else {
                free(value);
                value = NULL;
            }
        }
        sodium_memzero(pair, sizeof pair);
        free(box);
        break;
    }
    json_decref(all);
    return value;
}

char *egress_transform_lines(const char *transforms, const char *tenant, bool strict,
                             sg_error_t **err)
{
    const char *state_dir = egress_state_dir();
    json_t *t = transforms && *transforms ? json_loads(transforms, 0, NULL) : NULL;
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (f == NULL)
        abort();
    const char *host, *header;
    json_t *headers, *v;
    json_object_foreach (t, host, headers) {
        json_object_foreach (headers, header, v) {
            char *line = NULL;
            size_t line_size = 0;
            FILE *l = open_memstream(&line, &line_size);
            if (l == NULL)
                abort();
            fprintf(l, "header %s\t%s\t", host, header);
            bool whole = true;
            for (const char *p = json_string_value(v); p && *p;) {
                size_t n, len = placeholder(p, &n);
                if (len == 0) {
                    fputc(*p++, l);
                    continue;
                }
                const char *name = p + sizeof PLACEHOLDER - 1;
                char *value = tenant && state_dir ? secret(state_dir, tenant, name, n) : NULL;
                if (value && !strpbrk(value, "\r\n\t"))
                    fputs(value, l);
                else if (whole && strict)
                    sg_error_set(err, SG_E_INVALID,
                                 value ? "rules.%s: secret '%.*s' holds a line break or a tab"
                                       : "rules.%s: no secret '%.*s' (POST /secrets makes one)",
                                 host, (int)n, name);
                whole = whole && value && !strpbrk(value, "\r\n\t");
                if (value)
                    sodium_memzero(value, strlen(value));
                free(value);
                p += len;
            }
            fclose(l);
            /* A secret gone since: the header goes, not its placeholder. */
            if (whole)
                fprintf(f, "%s\n", line);
            sodium_memzero(line, line_size);
            free(line);
        }
    }
    fclose(f);
    json_decref(t);
    if (err && *err) {
        sodium_memzero(buf, size);
        free(buf);
        return NULL;
    }
    return buf;
}

int egress_transform_certs(const char *transforms, sg_error_t **err)
{
    json_t *t = transforms && *transforms ? json_loads(transforms, 0, NULL) : NULL, *v;
    const char *host;
    int rc = 0;
    json_object_foreach (t, host, v)
        if (rc == 0)
            rc = egress_proxy_cert(host, err);
    json_decref(t);
    return rc;
}
