/* conn: what a request's connection tells — the key it presents, its
 * client's address — and libmicrohttpd's own log.  http.c's own, as
 * routes.h is. */
#ifndef SG_HTTP_CONN_H
#define SG_HTTP_CONN_H

#include <microhttpd.h>
#include <stdarg.h>
#include <sys/socket.h>

/* The key a request presents (the headers and query parameter below), or NULL. */
const char *http_presented_key(struct MHD_Connection *conn);
const struct sockaddr *http_client_addr(struct MHD_Connection *conn);
/* libmicrohttpd's messages, to sandgate's log. */
void http_mhd_log(void *cls, const char *fmt, va_list ap);

#endif
