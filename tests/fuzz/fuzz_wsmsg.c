/* libFuzzer harness for the Jupyter WebSocket message codec (gateway/jupyter/wsmsg.c).
 *
 * Input: one byte (bit 0 set: a text frame, else binary), then the frame's
 * payload, decoded as both formats would (default and v1).  Properties
 * checked beyond "no crash, no leak, no UB": every refusal says why and
 * leaves the channel alone; a decoded message is on shell, control or stdin
 * with a header the checks promise; it encodes in the same format, in a
 * frame of the type the format calls for, and decodes again to the same
 * channel, parts and buffers, and that encodes to the same bytes; it
 * survives the other format too when its buffers fit there.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/jupyter/wsmsg.h"

static bool same_msg(const jmsg_t *a, const jmsg_t *b)
{
    if (!json_equal(jmsg_header(a), jmsg_header(b)) ||
        !json_equal(jmsg_parent(a), jmsg_parent(b)) ||
        !json_equal(jmsg_metadata(a), jmsg_metadata(b)) ||
        !json_equal(jmsg_content(a), jmsg_content(b)))
        return false;
    zmsg_t *ba = jmsg_buffers(a), *bb = jmsg_buffers(b);
    if (zmsg_size(ba) != zmsg_size(bb))
        return false;
    zframe_t *fb = zmsg_first(bb);
    for (zframe_t *fa = zmsg_first(ba); fa; fa = zmsg_next(ba), fb = zmsg_next(bb))
        if (!zframe_eq(fa, fb))
            return false;
    return true;
}

/* m (decoded from chan) encoded in format f decodes to the same; returns the
 * encoding (free()). */
static uint8_t *round_trip(wsmsg_format_t f, jchan_t chan, const jmsg_t *m, size_t *len)
{
    ws_opcode_t op;
    sg_error_t *err = NULL;
    uint8_t *out = wsmsg_encode(f, chan, m, &op, len, &err);
    if (out == NULL || err != NULL)
        abort(); /* every decoded message encodes */
    bool text = f == WSMSG_DEFAULT && zmsg_size(jmsg_buffers(m)) == 0;
    if (op != (text ? WS_TEXT : WS_BINARY))
        abort();
    jchan_t chan2 = JCHAN_HB;
    jmsg_t *m2 = wsmsg_decode(f, op, out, *len, &chan2, &err);
    if (m2 == NULL || chan2 != chan || !same_msg(m, m2))
        abort();
    /* ... and that one encodes to the same bytes */
    size_t len2;
    uint8_t *out2 = wsmsg_encode(f, chan2, m2, &op, &len2, &err);
    if (out2 == NULL || len2 != *len || memcmp(out, out2, len2) != 0)
        abort();
    free(out2);
    jmsg_destroy(&m2);
    return out;
}

static void check(wsmsg_format_t f, ws_opcode_t op, const uint8_t *data, size_t size)
{
    jchan_t chan = JCHAN_HB;
    sg_error_t *err = NULL;
    jmsg_t *m = wsmsg_decode(f, op, data, size, &chan, &err);
    if (m == NULL) {
        if (err == NULL || err->msg == NULL || err->msg[0] == 0 || chan != JCHAN_HB)
            abort(); /* every refusal says why, and sets no channel */
        sg_error_free(&err);
        return;
    }
    if (err != NULL)
        abort();
    if (chan != JCHAN_SHELL && chan != JCHAN_CONTROL && chan != JCHAN_STDIN)
        abort();
    size_t id_len = strlen(jmsg_id(m));
    if (id_len == 0 || id_len > WSMSG_MAX_MSG_ID || jmsg_type(m)[0] == 0)
        abort();
    size_t nbuf = zmsg_size(jmsg_buffers(m));
    if (nbuf + 6 > WSMSG_MAX_OFFSETS && !(f == WSMSG_DEFAULT && nbuf + 1 <= WSMSG_MAX_OFFSETS))
        abort(); /* more buffers than the offset table allows */
    size_t len;
    free(round_trip(f, chan, m, &len));
    /* The other format carries the same message when its table has room. */
    wsmsg_format_t other = f == WSMSG_V1 ? WSMSG_DEFAULT : WSMSG_V1;
    if (nbuf + 6 <= WSMSG_MAX_OFFSETS)
        free(round_trip(other, chan, m, &len));
    jmsg_destroy(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    ws_opcode_t op = data[0] & 1 ? WS_TEXT : WS_BINARY;
    check(WSMSG_DEFAULT, op, data + 1, size - 1);
    check(WSMSG_V1, op, data + 1, size - 1);
    return 0;
}
