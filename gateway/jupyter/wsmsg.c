#include "gateway/jupyter/wsmsg.h"

#include <string.h>

#include "common/xalloc.h"

/* --- decoding ----------------------------------------------------------------------- */

static uint64_t get_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* One JSON text; NULL with *err set (what names it) when it is not JSON. */
static json_t *json_part(const uint8_t *data, size_t len, const char *what, sg_error_t **err)
{
    json_error_t jerr;
    json_t *j = json_loadb((const char *)data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL)
        sg_error_set(err, SG_E_INVALID, "%s is not valid JSON: %s", what, jerr.text);
    return j;
}

/* Reads an offset table: a count of width bytes, then that many offsets of
 * width bytes.  Every offset must lie past the table and within len, and not
 * go backwards.  Returns the offsets (free()) and sets *n_out; NULL with
 * *err set (what names the table) when the table is not one. */
static uint64_t *read_offsets(const uint8_t *data, size_t len, int width, bool little,
                              const char *what, size_t *n_out, sg_error_t **err)
{
    if (len < (size_t)width) {
        sg_error_set(err, SG_E_INVALID, "bad %s: %zu bytes, too short for its count", what, len);
        return NULL;
    }
    uint64_t n = little ? get_le64(data) : get_be(data, width);
    /* n is checked before (1 + n) * width is computed: that cannot overflow. */
    if (n == 0 || n > WSMSG_MAX_OFFSETS) {
        sg_error_set(err, n ? SG_E_LIMIT : SG_E_INVALID, "bad %s: %llu offsets (1 to %d allowed)",
                     what, (unsigned long long)n, WSMSG_MAX_OFFSETS);
        return NULL;
    }
    uint64_t table = (1 + n) * (uint64_t)width;
    if (table > len) {
        sg_error_set(err, SG_E_INVALID, "bad %s: %llu offsets need %llu bytes, the message has %zu",
                     what, (unsigned long long)n, (unsigned long long)table, len);
        return NULL;
    }
    uint64_t *offs = xzalloc(sizeof *offs * n);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = data + (1 + i) * width;
        offs[i] = little ? get_le64(p) : get_be(p, width);
        if (offs[i] > len)
            sg_error_set(err, SG_E_INVALID, "bad %s: offset %zu is %llu, past the end (%zu bytes)",
                         what, i, (unsigned long long)offs[i], len);
        else if (offs[i] < table)
            sg_error_set(err, SG_E_INVALID,
                         "bad %s: offset %zu is %llu, inside the table (%llu bytes)", what, i,
                         (unsigned long long)offs[i], (unsigned long long)table);
        else if (i > 0 && offs[i] < offs[i - 1])
            sg_error_set(err, SG_E_INVALID, "bad %s: offset %zu is %llu, before offset %zu (%llu)",
                         what, i, (unsigned long long)offs[i], i - 1,
                         (unsigned long long)offs[i - 1]);
        else
            continue;
        free(offs);
        return NULL;
    }
    *n_out = (size_t)n;
    return offs;
}

/* The channels a frontend may send on. */
static int chan_from_name(const char *name, jchan_t *chan)
{
    static const jchan_t allowed[] = {JCHAN_SHELL, JCHAN_CONTROL, JCHAN_STDIN};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        if (strcmp(name, jchan_name(allowed[i])) == 0) {
            *chan = allowed[i];
            return 0;
        }
    return -1;
}

static const char *const part_names[4] = {"header", "parent_header", "metadata", "content"};

jmsg_t *wsmsg_decode(wsmsg_format_t format, ws_opcode_t op, const uint8_t *data, size_t len,
                     jchan_t *chan, sg_error_t **err)
{
    json_t *obj = NULL, *parts[4] = {0};
    char channel[16] = "shell";
    uint64_t *offs = NULL;
    size_t n = 0, first_buf = 0, nbuf = 0; /* buffer i starts at offs[first_buf + i] */
    jmsg_t *m = NULL;
    if (op != WS_TEXT && op != WS_BINARY) {
        sg_error_set(err, SG_E_INVALID, "not a data frame (opcode %d)", (int)op);
        return NULL;
    }
    if (op == WS_TEXT) {
        obj = json_part(data, len, "the message", err);
        if (obj == NULL)
            goto out;
    } else if (format == WSMSG_V1) {
        offs = read_offsets(data, len, 8, true, "v1 offset table", &n, err);
        if (offs == NULL)
            goto out;
        if (n < 6) {
            sg_error_set(err, SG_E_INVALID,
                         "bad v1 offset table: %zu offsets (a channel and four parts need 6)", n);
            goto out;
        }
        size_t clen = offs[1] - offs[0];
        if (clen == 0 || clen >= sizeof channel) {
            sg_error_set(err, SG_E_INVALID, "bad channel: %zu bytes (1 to %zu allowed)", clen,
                         sizeof channel - 1);
            goto out;
        }
        if (memchr(data + offs[0], 0, clen)) { /* jupyter_server would not know it either */
            sg_error_set(err, SG_E_INVALID, "bad channel: a NUL byte in its name");
            goto out;
        }
        memcpy(channel, data + offs[0], clen);
        channel[clen] = 0;
        for (int i = 0; i < 4; i++) {
            parts[i] = json_part(data + offs[1 + i], offs[2 + i] - offs[1 + i], part_names[i], err);
            if (parts[i] == NULL)
                goto out;
        }
        first_buf = 5;
        nbuf = n - 6; /* the last offset ends the last buffer */
    } else {
        offs = read_offsets(data, len, 4, false, "offset table", &n, err);
        if (offs == NULL)
            goto out;
        obj = json_part(data + offs[0], (n > 1 ? offs[1] : len) - offs[0], "the message", err);
        if (obj == NULL)
            goto out;
        first_buf = 1;
        nbuf = n - 1; /* the last buffer runs to the end */
    }
    if (obj) {
        if (!json_is_object(obj)) {
            sg_error_set(err, SG_E_INVALID, "the message is not a JSON object");
            goto out;
        }
        json_t *ch = json_object_get(obj, "channel");
        if (json_is_string(ch)) {
            if (json_string_length(ch) >= sizeof channel) {
                sg_error_set(err, SG_E_INVALID, "bad channel: %zu bytes (1 to %zu allowed)",
                             json_string_length(ch), sizeof channel - 1);
                goto out;
            }
            strcpy(channel, json_string_value(ch));
        }
        for (int i = 0; i < 4; i++) {
            json_t *v = json_object_get(obj, part_names[i]);
            parts[i] = v == NULL || json_is_null(v) ? json_object() : json_incref(v);
        }
    }
    for (int i = 0; i < 4; i++)
        if (!json_is_object(parts[i])) {
            sg_error_set(err, SG_E_INVALID,
                         "%s is not a JSON object (header, parent_header, metadata and content "
                         "must be)",
                         part_names[i]);
            goto out;
        }
    const char *id = json_string_value(json_object_get(parts[0], "msg_id"));
    const char *type = json_string_value(json_object_get(parts[0], "msg_type"));
    if (!id || !*id || strlen(id) > WSMSG_MAX_MSG_ID || !type || !*type) {
        sg_error_set(err, SG_E_INVALID,
                     "the header needs msg_id (1 to %d bytes) and msg_type, non-empty strings",
                     WSMSG_MAX_MSG_ID);
        goto out;
    }
    jchan_t c;
    if (chan_from_name(channel, &c) < 0) {
        sg_error_set(err, SG_E_INVALID, "channel must be shell, control or stdin");
        goto out;
    }
    m = jmsg_from_parts(parts[0], parts[1], parts[2], parts[3]);
    memset(parts, 0, sizeof parts);
    for (size_t i = first_buf; i < first_buf + nbuf; i++) {
        uint64_t end = i + 1 < n ? offs[i + 1] : len;
        zmsg_addmem(jmsg_buffers(m), data + offs[i], end - offs[i]);
    }
    *chan = c;
out:
    for (int i = 0; i < 4; i++)
        json_decref(parts[i]);
    json_decref(obj);
    free(offs);
    return m;
}

/* --- encoding ----------------------------------------------------------------------- */

typedef struct {
    uint8_t *b;
    size_t len, cap;
} out_t;

static void reserve(out_t *o, size_t n)
{
    if (o->len + n > o->cap) {
        o->cap = (o->len + n) * 2;
        o->b = xrealloc(o->b, o->cap);
    }
}

static void put(out_t *o, const void *data, size_t n)
{
    reserve(o, n);
    if (n)
        memcpy(o->b + o->len, data, n);
    o->len += n;
}

static void put_json(out_t *o, const json_t *j)
{
    size_t n = json_dumpb(j, NULL, 0, JSON_COMPACT);
    reserve(o, n);
    o->len += json_dumpb(j, (char *)o->b + o->len, n, JSON_COMPACT);
}

static void set_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void set_be32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

/* v1: count, offsets (the channel, the four parts, each buffer, the end),
 * then the channel name, the parts and the buffers. */
static void encode_v1(out_t *o, const char *name, const jmsg_t *m)
{
    zmsg_t *bufs = jmsg_buffers(m);
    const json_t *parts[4] = {jmsg_header(m), jmsg_parent(m), jmsg_metadata(m), jmsg_content(m)};
    size_t noff = 1 + 4 + zmsg_size(bufs) + 1;
    o->len = o->cap = 8 * (1 + noff);
    o->b = xzalloc(o->cap);
    set_le64(o->b, noff);
    size_t k = 1; /* the next table entry */
    set_le64(o->b + 8 * k++, o->len);
    put(o, name, strlen(name));
    for (int i = 0; i < 4; i++) {
        set_le64(o->b + 8 * k++, o->len);
        put_json(o, parts[i]);
    }
    for (zframe_t *f = zmsg_first(bufs); f; f = zmsg_next(bufs)) {
        set_le64(o->b + 8 * k++, o->len);
        put(o, zframe_data(f), zframe_size(f));
    }
    set_le64(o->b + 8 * k, o->len);
}

/* Default format with buffers: count, offsets (the JSON, each buffer), then
 * the JSON and the buffers.  -1 when an offset does not fit 32 bits. */
static int encode_default_binary(out_t *o, const json_t *j, const jmsg_t *m, sg_error_t **err)
{
    zmsg_t *bufs = jmsg_buffers(m);
    size_t n = 1 + zmsg_size(bufs);
    size_t table = 4 * (1 + n);
    if (table > UINT32_MAX)
        return sg_error_set(err, SG_E_LIMIT, "%zu buffers are too many for 32-bit offsets", n - 1);
    o->len = o->cap = table;
    o->b = xzalloc(o->cap);
    set_be32(o->b, (uint32_t)n);
    size_t k = 1;
    set_be32(o->b + 4 * k++, (uint32_t)o->len);
    put_json(o, j);
    for (zframe_t *f = zmsg_first(bufs); f; f = zmsg_next(bufs)) {
        if (o->len > UINT32_MAX)
            return sg_error_set(err, SG_E_LIMIT,
                                "a buffer would start at byte %zu, past 32-bit offsets", o->len);
        set_be32(o->b + 4 * k++, (uint32_t)o->len);
        put(o, zframe_data(f), zframe_size(f));
    }
    return 0;
}

uint8_t *wsmsg_encode(wsmsg_format_t format, jchan_t chan, const jmsg_t *msg, ws_opcode_t *op,
                      size_t *len, sg_error_t **err)
{
    if ((unsigned)chan >= JCHAN_COUNT) {
        sg_error_set(err, SG_E_INVALID, "no channel %d", (int)chan);
        return NULL;
    }
    const char *name = jchan_name(chan);
    out_t o = {0};
    if (format == WSMSG_V1) {
        encode_v1(&o, name, msg);
        *op = WS_BINARY;
        *len = o.len;
        return o.b;
    }
    json_t *header = jmsg_header(msg);
    json_t *j = json_pack("{s:O, s:O, s:O, s:O, s:s, s:[]}", "header", header, "parent_header",
                          jmsg_parent(msg), "metadata", jmsg_metadata(msg), "content",
                          jmsg_content(msg), "channel", name, "buffers");
    if (j == NULL) {
        sg_error_set(err, SG_E_INTERNAL, "cannot build the message's JSON");
        return NULL;
    }
    json_object_set(j, "msg_id", json_object_get(header, "msg_id"));
    json_object_set(j, "msg_type", json_object_get(header, "msg_type"));
    if (zmsg_size(jmsg_buffers(msg)) == 0) {
        put_json(&o, j);
        *op = WS_TEXT;
    } else {
        json_object_del(j, "buffers");
        if (encode_default_binary(&o, j, msg, err) < 0) {
            free(o.b);
            o.b = NULL;
        }
        *op = WS_BINARY;
    }
    json_decref(j);
    *len = o.len;
    return o.b;
}
