/* certs: the egress proxy's CA and the certificates it shows a sandbox for
 * the hosts whose requests it changes (a rule's headers over TLS), made
 * with openssl (internal.h). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/xalloc.h"
#include "kernelmgr/egress/internal.h"

/* Runs cmd with sh, files it makes readable by root only. */
static int sh(const char *cmd)
{
    cleanup_free char *umasked = xasprintf("umask 077 && %s", cmd);
    const char *argv[] = {"/bin/sh", "-c", umasked, NULL};
    return proc_run_sync(argv, NULL, NULL) == 0 ? 0 : -1;
}

int egress_make_ca(const char *dir, sg_error_t **err)
{
    cleanup_free char *crt = xasprintf("%s/ca.crt", dir), *key = xasprintf("%s/ca.key", dir);
    cleanup_free char *def = xasprintf("%s/default.pem", dir);
    cleanup_free char *certs = xasprintf("%s/certs", dir);
    if (mkdir(certs, 0700) < 0 && errno != EEXIST)
        return sg_error_errno(err, errno, "cannot create %s", certs);
    if (access(crt, R_OK) != 0 || access(key, R_OK) != 0 || access(def, R_OK) != 0) {
        if (egress_tool("openssl") == NULL)
            return sg_error_set(err, SG_E_UNAVAILABLE,
                                "openssl not found (apt-get install openssl)");
        cleanup_free char *cmd = xasprintf(
            "cd '%s' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
            "-days 3650 -subj '/CN=sandgate egress proxy CA' -keyout ca.key -out ca.crt "
            "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,"
            "cRLSign 2>/dev/null && openssl req -x509 -newkey ec -pkeyopt "
            "ec_paramgen_curve:P-256 -nodes -days 3650 -subj '/CN=sandgate egress proxy' "
            "-keyout default.key -out default.crt 2>/dev/null && cat default.crt default.key > "
            "default.pem && rm -f default.key default.crt",
            dir);
        if (sh(cmd) < 0)
            return sg_error_set(err, SG_E_UNAVAILABLE, "making the egress proxy's CA in %s", dir);
        log_info("egress: made the proxy's CA %s (sandboxes with a network trust it)", crt);
    }
    /* The list HAProxy loads: the default, and every host's made before. */
    cleanup_free char *list = xasprintf("%s/certs.list", dir);
    FILE *f = fopen(list, "we");
    if (f == NULL)
        return sg_error_errno(err, errno, "cannot write %s", list);
    fprintf(f, "%s\n", def);
    DIR *d = opendir(certs);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".pem") && e->d_name[0] != '.')
            fprintf(f, "%s/%s\n", certs, e->d_name);
    if (d)
        closedir(d);
    return fclose(f) == 0 ? 0 : sg_error_errno(err, errno, "cannot write %s", list);
}

int egress_proxy_cert(const char *host, sg_error_t **err)
{
    const char *dir = egress_proxy_dir();
    /* "*.example.com" is certs/_.example.com.pem ('_' is in no host name) */
    cleanup_free char *pem =
        xasprintf("%s/certs/%s%s.pem", dir, host[0] == '*' ? "_" : "", host + (host[0] == '*'));
    if (access(pem, R_OK) == 0) /* made before: HAProxy loaded it at its start */
        return 0;
    cleanup_free char *cmd = xasprintf(
        "cd '%s' && t=$(mktemp -d) && printf 'subjectAltName=DNS:%s\\nbasicConstraints=CA:FALSE\\n"
        "extendedKeyUsage=serverAuth\\n' > $t/ext && openssl req -newkey ec -pkeyopt "
        "ec_paramgen_curve:P-256 -nodes -keyout $t/key -out $t/csr -subj '/CN=%s' 2>/dev/null && "
        "openssl x509 -req -in $t/csr -CA ca.crt -CAkey ca.key -CAcreateserial -CAserial ca.srl "
        "-days 825 -extfile $t/ext -out $t/crt 2>/dev/null && cat $t/crt $t/key > '%s.new' && "
        "mv '%s.new' '%s'; r=$?; rm -rf $t; exit $r",
        dir, host, host, pem, pem, pem);
    if (sh(cmd) < 0)
        return sg_error_set(err, SG_E_UNAVAILABLE, "making the egress proxy's certificate for %s",
                            host);
    /* Into the running proxy (its runtime API), and its list for the next start. */
    FILE *f = fopen(pem, "re");
    cleanup_free char *text = NULL;
    size_t len = 0;
    if (f == NULL || getdelim(&text, &len, 0, f) < 0) {
        if (f)
            fclose(f);
        return sg_error_errno(err, errno, "cannot read %s", pem);
    }
    fclose(f);
    cleanup_free char *list = xasprintf("%s/certs.list", dir);
    cleanup_free char *cmds[] = {
        xasprintf("new ssl cert %s\n", pem), xasprintf("set ssl cert %s <<\n%s\n", pem, text),
        xasprintf("commit ssl cert %s\n", pem), xasprintf("add ssl crt-list %s %s\n", list, pem)};
    char answer[1024];
    for (size_t i = 0; i < 4; i++)
        if (egress_proxy_say("admin.sock", cmds[i], answer, sizeof answer) < 0 ||
            (i >= 2 && !strstr(answer, "Success")))
            return sg_error_set(err, SG_E_UNAVAILABLE,
                                "the egress proxy did not take the certificate for %s: %.*s", host,
                                (int)strcspn(answer, "\n"), answer);
    f = fopen(list, "ae");
    if (f) {
        fprintf(f, "%s\n", pem);
        fclose(f);
    }
    log_info("egress: the proxy shows sandboxes a certificate for %s", host);
    return 0;
}
