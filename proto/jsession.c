#include "proto/jsession.h"

#include <assert.h>
#include <sodium.h>
#include <string.h>

#include "common/xalloc.h"

/* Signatures seen recently, to refuse a replayed message.  Each is kept as
 * its first 64 bits (an HMAC's bits are uniform: that two messages in one
 * window share them is a 2^-48 chance at the default size) in a FIFO ring,
 * the order of forgetting, and found through an open-addressing table of
 * ring positions (linear probing, deletion by backward shift).  Both grow on
 * demand up to max entries: 16 to 24 bytes an entry, so a kernel that has
 * sent 2^16 messages costs 1 MiB here (a hash of hex strings took 13). */
typedef struct {
    uint64_t *ring;  /* fingerprints; once full, ring[next] is the oldest */
    uint32_t *slots; /* a ring index + 1, or 0 for an empty slot */
    size_t max, alloc, len, next, nslots;
} replay_cache_t;

#define REPLAY_MAX (1u << 30)

static void replay_init(replay_cache_t *rc, size_t max)
{
    *rc = (replay_cache_t){.max = max == 0 ? 1 : max > REPLAY_MAX ? REPLAY_MAX : max};
}

static void replay_fini(replay_cache_t *rc)
{
    free(rc->ring);
    free(rc->slots);
    *rc = (replay_cache_t){0};
}

/* The slot holding ring index idx + 1, or the empty slot that ends fp's
 * probe sequence when idx is SIZE_MAX (a lookup). */
static size_t replay_find(const replay_cache_t *rc, uint64_t fp, size_t idx)
{
    size_t mask = rc->nslots - 1;
    size_t i = fp & mask;
    for (; rc->slots[i]; i = (i + 1) & mask) {
        uint32_t v = rc->slots[i];
        if (idx == SIZE_MAX ? rc->ring[v - 1] == fp : v - 1 == idx)
            break;
    }
    return i;
}

static void replay_index(replay_cache_t *rc, size_t idx)
{
    rc->slots[replay_find(rc, rc->ring[idx], SIZE_MAX)] = (uint32_t)idx + 1;
}

/* Forgets the fingerprint at ring index idx: entries after its slot move
 * back into the hole unless that would put them before their home slot. */
static void replay_forget(replay_cache_t *rc, size_t idx)
{
    size_t mask = rc->nslots - 1;
    size_t hole = replay_find(rc, rc->ring[idx], idx);
    for (size_t j = (hole + 1) & mask; rc->slots[j]; j = (j + 1) & mask) {
        size_t home = rc->ring[rc->slots[j] - 1] & mask;
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            rc->slots[hole] = rc->slots[j];
            hole = j;
        }
    }
    rc->slots[hole] = 0;
}

/* Room for twice as many entries (at most max); the table, at most half
 * full, is rebuilt.  Only called before the ring wraps: ring[0..len). */
static void replay_grow(replay_cache_t *rc)
{
    rc->alloc = rc->alloc ? rc->alloc * 2 : 64;
    if (rc->alloc > rc->max)
        rc->alloc = rc->max;
    rc->ring = xrealloc(rc->ring, rc->alloc * sizeof *rc->ring);
    for (rc->nslots = 2; rc->nslots < 2 * rc->alloc;)
        rc->nslots *= 2;
    free(rc->slots);
    rc->slots = xzalloc(rc->nslots * sizeof *rc->slots);
    for (size_t i = 0; i < rc->len; i++)
        replay_index(rc, i);
}

/* Returns true if hex was seen before; otherwise remembers it. */
static bool replay_check_and_add(replay_cache_t *rc, const char hex[65])
{
    unsigned char bin[8];
    uint64_t fp;
    sodium_hex2bin(bin, sizeof bin, hex, 16, NULL, NULL, NULL);
    memcpy(&fp, bin, sizeof fp);
    if (rc->len > 0 && rc->slots[replay_find(rc, fp, SIZE_MAX)])
        return true;
    if (rc->len == rc->max) {
        replay_forget(rc, rc->next);
    } else {
        if (rc->len == rc->alloc)
            replay_grow(rc);
        rc->len++;
    }
    rc->ring[rc->next] = fp;
    replay_index(rc, rc->next);
    rc->next = (rc->next + 1) % rc->max;
    return false;
}

struct jsession {
    crypto_auth_hmacsha256_state keyed; /* HMAC state after absorbing the key */
    char id[37];
    char *username;
    size_t max_bytes;
    replay_cache_t replay;
    jsession_stats_t stats;
};

jsession_t *jsession_new(const void *key, size_t key_len, sg_error_t **err)
{
    if (key == NULL || key_len == 0) {
        sg_error_set(err, SG_E_AUTH, "an empty HMAC key is refused: messages would be unsigned");
        return NULL;
    }
    if (sodium_init() < 0) {
        sg_error_set(err, SG_E_INTERNAL, "libsodium failed to initialise");
        return NULL;
    }
    jsession_t *self = xzalloc(sizeof *self);
    crypto_auth_hmacsha256_init(&self->keyed, key, key_len);
    jmsg_uuid(self->id);
    self->username = xstrdup("sandgate");
    self->max_bytes = JSESSION_DEFAULT_MAX_BYTES;
    replay_init(&self->replay, JSESSION_DEFAULT_REPLAY_WINDOW);
    return self;
}

void jsession_destroy(jsession_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    jsession_t *self = *self_p;
    sodium_memzero(&self->keyed, sizeof self->keyed);
    replay_fini(&self->replay);
    free(self->username);
    free(self);
    *self_p = NULL;
}

const char *jsession_id(const jsession_t *self)
{
    return self->id;
}

void jsession_set_username(jsession_t *self, const char *username)
{
    free(self->username);
    self->username = xstrdup(username);
}

void jsession_set_max_bytes(jsession_t *self, size_t max_bytes)
{
    self->max_bytes = max_bytes;
}

void jsession_set_replay_window(jsession_t *self, size_t entries)
{
    replay_fini(&self->replay);
    replay_init(&self->replay, entries);
}

void jsession_stats(const jsession_t *self, jsession_stats_t *out)
{
    *out = self->stats;
    out->replay_bytes = self->replay.alloc * sizeof *self->replay.ring +
                        self->replay.nslots * sizeof *self->replay.slots;
}

jmsg_t *jsession_msg(const jsession_t *self, const char *msg_type, json_t *content)
{
    jmsg_t *msg = jmsg_new(msg_type, self->id, self->username);
    if (content)
        jmsg_set_content(msg, content);
    return msg;
}

void jsession_sign(const jsession_t *self, const void *const parts[], const size_t lens[], size_t n,
                   char hex[65])
{
    crypto_auth_hmacsha256_state st = self->keyed;
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    for (size_t i = 0; i < n; i++)
        crypto_auth_hmacsha256_update(&st, parts[i], lens[i]);
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_bin2hex(hex, 65, mac, sizeof mac);
}

static char *dump(json_t *obj, size_t *len)
{
    char *s = json_dumps(obj, JSON_COMPACT);
    assert(s != NULL); /* objects built by us always serialise */
    *len = strlen(s);
    return s;
}

zmsg_t *jsession_encode(const jsession_t *self, const jmsg_t *msg)
{
    json_t *objs[4] = {jmsg_header(msg), jmsg_parent(msg), jmsg_metadata(msg), jmsg_content(msg)};
    char *parts[4];
    size_t lens[4];
    for (int i = 0; i < 4; i++)
        parts[i] = dump(objs[i], &lens[i]);

    char hex[65];
    jsession_sign(self, (const void *const *)parts, lens, 4, hex);

    zmsg_t *out = zmsg_dup(jmsg_identities(msg));
    zmsg_addstr(out, JSESSION_DELIM);
    zmsg_addmem(out, hex, 64);
    for (int i = 0; i < 4; i++) {
        zmsg_addmem(out, parts[i], lens[i]);
        free(parts[i]);
    }
    for (zframe_t *f = zmsg_first(jmsg_buffers(msg)); f; f = zmsg_next(jmsg_buffers(msg)))
        zmsg_addmem(out, zframe_data(f), zframe_size(f));
    return out;
}

static bool frame_is(zframe_t *f, const char *s)
{
    size_t n = strlen(s);
    return zframe_size(f) == n && memcmp(zframe_data(f), s, n) == 0;
}

static json_t *parse_object(zframe_t *f, const char *what, sg_error_t **err)
{
    json_error_t jerr;
    json_t *v = json_loadb((const char *)zframe_data(f), zframe_size(f),
                           JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (v == NULL) {
        sg_error_set(err, SG_E_INVALID, "%s is not valid JSON: %s", what, jerr.text);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        sg_error_set(err, SG_E_INVALID, "%s is not a JSON object", what);
        return NULL;
    }
    return v;
}

static int check_header(json_t *header, sg_error_t **err)
{
    static const char *required[] = {"msg_id",   "msg_type", "session",
                                     "username", "date",     "version"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        json_t *v = json_object_get(header, required[i]);
        if (v == NULL)
            return sg_error_set(err, SG_E_INVALID, "header has no %s", required[i]);
        if (!json_is_string(v))
            return sg_error_set(err, SG_E_INVALID, "header %s is not a string", required[i]);
    }
    if (json_string_length(json_object_get(header, "msg_type")) == 0)
        return sg_error_set(err, SG_E_INVALID, "header msg_type is empty");
    return 0;
}

/* Counts the rejection in the right bucket and passes the error on. */
static jmsg_t *reject(jsession_t *self, uint64_t *counter, zmsg_t **frames_p, json_t *parsed[4])
{
    (*counter)++;
    zmsg_destroy(frames_p);
    for (int i = 0; parsed && i < 4; i++)
        json_decref(parsed[i]);
    return NULL;
}

jmsg_t *jsession_decode(jsession_t *self, zmsg_t **frames_p, sg_error_t **err)
{
    zmsg_t *frames = *frames_p;
    *frames_p = NULL;
    if (frames == NULL) {
        sg_error_set(err, SG_E_INVALID, "no message");
        self->stats.malformed++;
        return NULL;
    }
    if (zmsg_content_size(frames) > self->max_bytes) {
        sg_error_set(err, SG_E_LIMIT, "message of %zu bytes exceeds the limit of %zu",
                     zmsg_content_size(frames), self->max_bytes);
        return reject(self, &self->stats.oversized, &frames, NULL);
    }

    /* Identities are every frame before the delimiter. */
    size_t nident = 0;
    zframe_t *f;
    for (f = zmsg_first(frames); f && !frame_is(f, JSESSION_DELIM); f = zmsg_next(frames))
        nident++;
    if (f == NULL) {
        sg_error_set(err, SG_E_INVALID, "no <IDS|MSG> delimiter in %zu frames", zmsg_size(frames));
        return reject(self, &self->stats.malformed, &frames, NULL);
    }
    if (zmsg_size(frames) < nident + 6) {
        sg_error_set(err, SG_E_INVALID, "truncated message: %zu frames after the delimiter, need 5",
                     zmsg_size(frames) - nident - 1);
        return reject(self, &self->stats.malformed, &frames, NULL);
    }

    zframe_t *sig = zmsg_next(frames);
    zframe_t *json_frames[4];
    const void *parts[4];
    size_t lens[4];
    for (int i = 0; i < 4; i++) {
        json_frames[i] = zmsg_next(frames);
        parts[i] = zframe_data(json_frames[i]);
        lens[i] = zframe_size(json_frames[i]);
    }
    if (zframe_size(sig) == 0) {
        sg_error_set(err, SG_E_AUTH, "unsigned message refused");
        return reject(self, &self->stats.unsigned_msgs, &frames, NULL);
    }
    char expect[65];
    jsession_sign(self, parts, lens, 4, expect);
    if (zframe_size(sig) != 64 || sodium_memcmp(zframe_data(sig), expect, 64) != 0) {
        sg_error_set(err, SG_E_AUTH, "invalid message signature");
        return reject(self, &self->stats.bad_signature, &frames, NULL);
    }
    if (replay_check_and_add(&self->replay, expect)) {
        sg_error_set(err, SG_E_AUTH, "replayed message signature refused");
        return reject(self, &self->stats.replayed, &frames, NULL);
    }

    static const char *names[4] = {"header", "parent_header", "metadata", "content"};
    json_t *parsed[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < 4; i++) {
        parsed[i] = parse_object(json_frames[i], names[i], err);
        if (parsed[i] == NULL)
            return reject(self, &self->stats.malformed, &frames, parsed);
    }
    if (check_header(parsed[0], err) < 0)
        return reject(self, &self->stats.malformed, &frames, parsed);

    jmsg_t *msg = jmsg_from_parts(parsed[0], parsed[1], parsed[2], parsed[3]);
    /* Move identity frames and buffers out of the wire message. */
    for (size_t i = 0; i < nident; i++)
        zmsg_append(jmsg_identities(msg), &(zframe_t *){zmsg_pop(frames)});
    for (int i = 0; i < 6; i++) {
        zframe_t *drop = zmsg_pop(frames);
        zframe_destroy(&drop);
    }
    while (zmsg_size(frames) > 0)
        zmsg_append(jmsg_buffers(msg), &(zframe_t *){zmsg_pop(frames)});
    zmsg_destroy(&frames);
    self->stats.accepted++;
    return msg;
}
