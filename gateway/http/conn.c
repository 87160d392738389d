/* conn: what a request's connection tells, for http.c. */
#include "gateway/http/conn.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"

/* The key a request presents, or NULL: "Authorization: Bearer K" or
 * "token K", the headers the E2B SDKs send (X-API-Key to the sandbox
 * API, X-Access-Token and E2B-Traffic-Access-Token to a sandbox), or
 * ?token=K (browsers cannot set headers on a WebSocket; Jupyter clients
 * send it so). */
const char *http_presented_key(struct MHD_Connection *conn)
{
    const char *given = NULL;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0)
        given = auth + 7;
    else if (auth && strncasecmp(auth, "token ", 6) == 0)
        given = auth + 6;
    if (!given)
        given = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-API-Key");
    if (!given)
        given = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Access-Token");
    if (!given)
        given = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2B-Traffic-Access-Token");
    if (!given)
        given = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "token");
    return given;
}

const struct sockaddr *http_client_addr(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return ci ? ci->client_addr : NULL;
}

void http_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = 0;
    /* A client that leaves mid-response (a stream it stopped reading) is
     * the normal course, and the execution's end says what became of it. */
    if (strstr(line, "no longer available") || strstr(line, "reset by peer") ||
        strstr(line, "Broken pipe"))
        log_info("http: %s", line);
    else
        log_warn("http: %s", line);
}
