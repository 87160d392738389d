#include "proto/jmsg.h"

#include <assert.h>
#include <sodium.h>
#include <time.h>

#include "common/replica.h"
#include "common/xalloc.h"

struct jmsg {
    json_t *header, *parent, *metadata, *content;
    zmsg_t *identities, *buffers;
};

void jmsg_uuid(char out[37])
{
    uuid_v4(out);
}

void jmsg_now(char out[32])
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%06ldZ", ts.tv_nsec / 1000);
}

jmsg_t *jmsg_from_parts(json_t *header, json_t *parent, json_t *metadata, json_t *content)
{
    assert(json_is_object(header) && json_is_object(parent));
    assert(json_is_object(metadata) && json_is_object(content));
    jmsg_t *self = xzalloc(sizeof *self);
    self->header = header;
    self->parent = parent;
    self->metadata = metadata;
    self->content = content;
    self->identities = zmsg_new();
    self->buffers = zmsg_new();
    return self;
}

jmsg_t *jmsg_new(const char *msg_type, const char *session, const char *username)
{
    char id[37], date[32];
    jmsg_uuid(id);
    jmsg_now(date);
    json_t *header =
        json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", id, "msg_type", msg_type, "session",
                  session, "username", username, "date", date, "version", JMSG_PROTOCOL_VERSION);
    assert(header != NULL); /* only fails on NULL or invalid UTF-8 arguments */
    return jmsg_from_parts(header, json_object(), json_object(), json_object());
}

void jmsg_destroy(jmsg_t **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    jmsg_t *self = *self_p;
    json_decref(self->header);
    json_decref(self->parent);
    json_decref(self->metadata);
    json_decref(self->content);
    zmsg_destroy(&self->identities);
    zmsg_destroy(&self->buffers);
    free(self);
    *self_p = NULL;
}

json_t *jmsg_header(const jmsg_t *self)
{
    return self->header;
}

json_t *jmsg_parent(const jmsg_t *self)
{
    return self->parent;
}

json_t *jmsg_metadata(const jmsg_t *self)
{
    return self->metadata;
}

json_t *jmsg_content(const jmsg_t *self)
{
    return self->content;
}

static const char *str_field(json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "";
}

const char *jmsg_type(const jmsg_t *self)
{
    return str_field(self->header, "msg_type");
}

const char *jmsg_id(const jmsg_t *self)
{
    return str_field(self->header, "msg_id");
}

const char *jmsg_parent_id(const jmsg_t *self)
{
    return str_field(self->parent, "msg_id");
}

const char *jmsg_content_str(const jmsg_t *self, const char *key)
{
    return json_string_value(json_object_get(self->content, key));
}

void jmsg_set_content(jmsg_t *self, json_t *content)
{
    assert(json_is_object(content));
    json_decref(self->content);
    self->content = content;
}

void jmsg_set_metadata(jmsg_t *self, json_t *metadata)
{
    assert(json_is_object(metadata));
    json_decref(self->metadata);
    self->metadata = metadata;
}

void jmsg_set_parent(jmsg_t *self, const jmsg_t *parent)
{
    json_decref(self->parent);
    self->parent = json_deep_copy(parent->header);
    zmsg_destroy(&self->identities);
    self->identities = zmsg_dup(parent->identities);
}

zmsg_t *jmsg_identities(const jmsg_t *self)
{
    return self->identities;
}

zmsg_t *jmsg_buffers(const jmsg_t *self)
{
    return self->buffers;
}
