#include "gateway/envd/proto.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "common/xalloc.h"

json_t *envd_unwrap(const char *body, size_t len, sg_error_t **err)
{
    const unsigned char *b = (const unsigned char *)body;
    if (len < ENVD_ENVELOPE) {
        sg_error_set(err, SG_E_INVALID, "a streaming request's body is one enveloped message");
        return NULL;
    }
    uint32_t n = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
    if (b[0] != 0) {
        sg_error_set(err, SG_E_INVALID, "envelope flags 0x%02x: compression is not supported",
                     b[0]);
        return NULL;
    }
    if (n > ENVD_MAX_MESSAGE || n != len - ENVD_ENVELOPE) {
        sg_error_set(err, SG_E_INVALID, "an envelope of %u bytes in a body of %zu", n, len);
        return NULL;
    }
    json_error_t je;
    json_t *msg = json_loadb(body + ENVD_ENVELOPE, n, 0, &je);
    if (!json_is_object(msg)) {
        json_decref(msg);
        sg_error_set(err, SG_E_INVALID, "the message is not a JSON object");
        return NULL;
    }
    return msg;
}

void envd_frame(uint8_t flags, const char *msg, size_t n, char **out, size_t *outlen)
{
    unsigned char *b = xmalloc(n + ENVD_ENVELOPE);
    b[0] = flags;
    b[1] = (unsigned char)(n >> 24);
    b[2] = (unsigned char)(n >> 16);
    b[3] = (unsigned char)(n >> 8);
    b[4] = (unsigned char)n;
    memcpy(b + ENVD_ENVELOPE, msg, n);
    *out = (char *)b;
    *outlen = n + ENVD_ENVELOPE;
}

static const struct {
    const char *sbfs, *code;
    unsigned files_status;
} sbfs_codes[] = {
    {"not_found", "not_found", 404},
    {"is_directory", "invalid_argument", 400},
    {"not_directory", "invalid_argument", 400},
    {"permission_denied", "permission_denied", 403},
    {"invalid_path", "invalid_argument", 400},
    {"exists", "already_exists", 409},
    {"not_empty", "failed_precondition", 400},
    {"no_space", "resource_exhausted", 507},
    {"too_large", "resource_exhausted", 413},
    {"unavailable", "unavailable", 503},
};

static const struct {
    sg_errkind_t kind;
    const char *code;
} kind_codes[] = {
    {SG_E_INVALID, "invalid_argument"},    {SG_E_AUTH, "unauthenticated"},
    {SG_E_NOTFOUND, "not_found"},          {SG_E_CONFLICT, "failed_precondition"},
    {SG_E_LIMIT, "resource_exhausted"},    {SG_E_TIMEOUT, "deadline_exceeded"},
    {SG_E_UNAVAILABLE, "unavailable"},     {SG_E_FORBIDDEN, "permission_denied"},
    {SG_E_NOSPACE, "resource_exhausted"},  {SG_E_METHOD, "unimplemented"},
    {SG_E_TOO_MANY, "resource_exhausted"}, {SG_E_QUOTA, "resource_exhausted"},
};

const char *envd_code(const char *sbfs_code, sg_errkind_t kind)
{
    for (size_t i = 0; sbfs_code && i < sizeof sbfs_codes / sizeof *sbfs_codes; i++)
        if (strcmp(sbfs_codes[i].sbfs, sbfs_code) == 0)
            return sbfs_codes[i].code;
    for (size_t i = 0; i < sizeof kind_codes / sizeof *kind_codes; i++)
        if (kind_codes[i].kind == kind)
            return kind_codes[i].code;
    return "internal";
}

unsigned envd_code_status(const char *code)
{
    static const struct {
        const char *code;
        unsigned status;
    } map[] = {
        {"canceled", 499},
        {"unknown", 500},
        {"invalid_argument", 400},
        {"deadline_exceeded", 504},
        {"not_found", 404},
        {"already_exists", 409},
        {"permission_denied", 403},
        {"resource_exhausted", 429},
        {"failed_precondition", 400},
        {"aborted", 409},
        {"out_of_range", 400},
        {"unimplemented", 501},
        {"internal", 500},
        {"unavailable", 503},
        {"data_loss", 500},
        {"unauthenticated", 401},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (strcmp(map[i].code, code) == 0)
            return map[i].status;
    return 500;
}

unsigned envd_files_status(const char *sbfs_code, sg_errkind_t kind)
{
    for (size_t i = 0; sbfs_code && i < sizeof sbfs_codes / sizeof *sbfs_codes; i++)
        if (strcmp(sbfs_codes[i].sbfs, sbfs_code) == 0)
            return sbfs_codes[i].files_status;
    return (unsigned)sg_error_http_status(kind);
}

json_t *envd_error_json(const char *code, const char *msg)
{
    return json_pack("{s:s, s:s}", "code", code, "message", msg ? msg : "");
}

static const char *file_type(const char *type)
{
    if (type && strcmp(type, "file") == 0)
        return "FILE_TYPE_FILE";
    if (type && strcmp(type, "dir") == 0)
        return "FILE_TYPE_DIRECTORY";
    if (type && strcmp(type, "symlink") == 0)
        return "FILE_TYPE_SYMLINK";
    return "FILE_TYPE_UNSPECIFIED";
}

/* envd's permissions, Go's os.FileMode.String(): a letter for the type
 * and for each special bit, in Go's order (d, L; u, g, t), or '-' when
 * there is none, then the rwx of perms ("rw-r--r--", sbfs's). */
static json_t *go_mode(const char *type, json_int_t mode, const char *perms)
{
    char s[16];
    size_t n = 0;
    if (type && strcmp(type, "dir") == 0)
        s[n++] = 'd';
    if (type && strcmp(type, "symlink") == 0)
        s[n++] = 'L';
    for (int i = 0; i < 3; i++)
        if (mode & (04000 >> i))
            s[n++] = "ugt"[i];
    if (n == 0)
        s[n++] = '-';
    snprintf(s + n, sizeof s - n, "%.9s", perms);
    return json_string(s);
}

json_t *envd_entry(const json_t *e)
{
    const char *type = json_string_value(json_object_get(e, "type"));
    /* A link that leads somewhere is as envd gives it: the type of what it
     * leads to, that whole path as its target (sbfs's target_type and
     * target_path); one that leads nowhere is a symlink. */
    const char *to_type = json_string_value(json_object_get(e, "target_type"));
    const char *to_path = json_string_value(json_object_get(e, "target_path"));
    json_t *out =
        json_pack("{s:s, s:s, s:s}", "name", json_string_value(json_object_get(e, "name")) ?: "",
                  "type", file_type(to_type ? to_type : type), "path",
                  json_string_value(json_object_get(e, "path")) ?: "");
    char size[32];
    snprintf(size, sizeof size, "%lld", (long long)json_integer_value(json_object_get(e, "size")));
    json_object_set_new(out, "size", json_string(size));
    json_object_set_new(out, "mode", json_integer(json_integer_value(json_object_get(e, "mode"))));
    const char *perms = json_string_value(json_object_get(e, "permissions"));
    if (perms)
        json_object_set_new(out, "permissions",
                            go_mode(to_type ? to_type : type,
                                    json_integer_value(json_object_get(e, "mode")), perms));
    static const char *const strs[][2] = {{"owner", "owner"},
                                          {"group", "group"},
                                          {"modified", "modifiedTime"},
                                          {"symlink_target", "symlinkTarget"}};
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) {
        json_t *v = json_object_get(e, strs[i][0]);
        if (json_is_string(v))
            json_object_set(out, strs[i][1], v);
    }
    json_t *meta = json_object_get(e, "metadata"); /* user.e2b.* (sbfs_write_meta) */
    if (json_object_size(meta))
        json_object_set(out, "metadata", meta);
    if (to_path) /* followed, as envd's stat follows a link */
        json_object_set_new(out, "symlinkTarget", json_string(to_path));
    else if (type && strcmp(type, "symlink") == 0) /* one that leads nowhere */
        json_object_set_new(out, "isSymlink", json_true());
    return out;
}

char *envd_abspath(const char *path)
{
    if (path[0] == '/')
        return xstrdup(path);
    if (path[0] == 0)
        return xstrdup("/home/user");
    return xasprintf("/home/user/%s", path);
}

const char *envd_str(const json_t *msg, const char *json_name, const char *proto_name)
{
    const json_t *v = json_object_get(msg, json_name);
    if (v == NULL && proto_name)
        v = json_object_get(msg, proto_name);
    return json_string_value(v);
}

char *envd_b64(const void *data, size_t n)
{
    size_t max = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
    char *out = xmalloc(max);
    sodium_bin2base64(out, max, data, n, sodium_base64_VARIANT_ORIGINAL);
    return out;
}

int envd_unb64(const char *s, unsigned char **out, size_t *outlen)
{
    static const int variants[] = {
        sodium_base64_VARIANT_ORIGINAL, sodium_base64_VARIANT_ORIGINAL_NO_PADDING,
        sodium_base64_VARIANT_URLSAFE, sodium_base64_VARIANT_URLSAFE_NO_PADDING};
    size_t len = strlen(s);
    unsigned char *buf = xmalloc(len / 4 * 3 + 3);
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        const char *end = NULL;
        if (sodium_base642bin(buf, len / 4 * 3 + 3, s, len, NULL, outlen, &end, variants[i]) == 0 &&
            end == s + len) {
            *out = buf;
            return 0;
        }
    }
    free(buf);
    return -1;
}
