/* libFuzzer harness for the WebSocket frame parser (gateway/jupyter/ws.c).
 *
 * Input: one byte choosing the chunk size (1-256) the bytes are fed in, then
 * the client's bytes.  Properties checked beyond "no crash, no leak, no UB":
 * the same input fed at once and in chunks gives the same messages and the
 * same verdict; no message exceeds the limit; every text message and close
 * reason delivered is valid UTF-8, every close code valid; an ended parser
 * stays ended.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/jupyter/ws.h"

#define MAX_MESSAGE 4096

typedef struct {
    size_t n;
    uint64_t hash; /* of every delivered (opcode, payload) */
} seen_t;

static void on_message(ws_opcode_t op, const uint8_t *data, size_t len, void *arg)
{
    seen_t *s = arg;
    if (len > MAX_MESSAGE)
        abort();
    if (op == WS_TEXT && !ws_utf8_valid(data, len))
        abort();
    if (op >= WS_CLOSE && len > 125)
        abort();
    if (op == WS_CLOSE) {
        unsigned code = ws_close_code(data, len);
        bool valid = len == 0 ? code == WS_CLOSE_NO_STATUS
                              : len >= 2 && code >= 1000 && code < 5000 && code != 1005 &&
                                    code != 1006 && ws_utf8_valid(data + 2, len - 2);
        if (!valid)
            abort();
    }
    s->n++;
    uint64_t h = s->hash ^ (uint64_t)op * 0x100000001b3ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ data[i]) * 0x100000001b3ull;
    s->hash = h ^ len;
}

static int run(const uint8_t *data, size_t size, size_t chunk, seen_t *seen)
{
    ws_parser_t *p = ws_parser_new(MAX_MESSAGE);
    int rc = 0;
    for (size_t i = 0; i < size && rc == 0; i += chunk)
        rc = ws_parser_feed(p, data + i, size - i < chunk ? size - i : chunk, on_message, seen);
    if (rc && ws_parser_feed(p, (const uint8_t *)"\x81\x80\0\0\0\0", 6, on_message, seen) != rc)
        abort();
    ws_parser_destroy(&p);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t chunk = (size_t)data[0] + 1;
    seen_t a = {0}, b = {0};
    int ra = run(data + 1, size - 1, size, &a);
    int rb = run(data + 1, size - 1, chunk, &b);
    if (ra != rb || a.n != b.n || a.hash != b.hash)
        abort();
    if (ra && ra != WS_CLOSE_PROTOCOL && ra != WS_CLOSE_INVALID_DATA && ra != WS_CLOSE_TOO_BIG)
        abort();
    return 0;
}
