/* envd_proto: Connect's envelopes, error codes and statuses, EntryInfo's
 * JSON, paths, bytes in base64. */
#include "gateway/envd/proto.h"

#include <stdlib.h>

#include "tests/lib/tap.h"

static json_t *unwrap(const char *body, size_t len)
{
    sg_error_t *err = NULL;
    json_t *msg = envd_unwrap(body, len, &err);
    sg_error_free(&err);
    return msg;
}

static void envelopes(void)
{
    const char *m = "{\"process\":{\"cmd\":\"/bin/bash\"}}";
    char *buf;
    size_t n;
    envd_frame(0, m, strlen(m), &buf, &n);
    is_int(n, strlen(m) + 5, "an envelope is 5 bytes and the message");
    ok(buf[0] == 0 && buf[4] == (char)strlen(m) && buf[1] == 0, "flags, then big-endian length");
    json_t *msg = unwrap(buf, n);
    is_str(json_string_value(json_object_get(json_object_get(msg, "process"), "cmd")), "/bin/bash",
           "a framed message unwraps to its JSON");
    json_decref(msg);
    ok(unwrap(buf, n - 1) == NULL, "a body shorter than its envelope says is refused");
    ok(unwrap(buf, 4) == NULL, "a body shorter than an envelope is refused");
    buf[0] = 1;
    ok(unwrap(buf, n) == NULL, "a compressed message is refused");
    free(buf);
    envd_frame(ENVD_FLAG_END, "[1]", 3, &buf, &n);
    ok((unsigned char)buf[0] == 0x02, "the end of a stream has flags 0x02");
    buf[0] = 0;
    ok(unwrap(buf, n) == NULL, "a message that is not an object is refused");
    free(buf);
    ok(unwrap("\0\xff\xff\xff\xff{}", 7) == NULL, "a huge length is refused");
}

static void codes(void)
{
    is_str(envd_code("not_found", SG_E_INTERNAL), "not_found", "sbfs not_found");
    is_str(envd_code("exists", SG_E_INVALID), "already_exists", "sbfs exists");
    is_str(envd_code("no_space", SG_E_NOSPACE), "resource_exhausted", "sbfs no_space");
    is_str(envd_code(NULL, SG_E_QUOTA), "resource_exhausted", "a tenant's quota");
    is_str(envd_code("whatever", SG_E_UNAVAILABLE), "unavailable", "else the kind's");
    is_str(envd_code(NULL, SG_E_INTERNAL), "internal", "internal");
    is_int(envd_code_status("not_found"), 404, "not_found is 404");
    is_int(envd_code_status("unauthenticated"), 401, "unauthenticated is 401");
    is_int(envd_code_status("resource_exhausted"), 429, "resource_exhausted is 429");
    is_int(envd_code_status("nonsense"), 500, "an unknown code is 500");
    is_int(envd_files_status("no_space", SG_E_NOSPACE), 507, "/files: no space is 507");
    is_int(envd_files_status(NULL, SG_E_NOTFOUND), 404, "/files: else the kind's status");
}

static void entries(void)
{
    json_t *e = json_pack("{s:s, s:s, s:s, s:I, s:i, s:s, s:s, s:s, s:s}", "name", "a.csv", "path",
                          "/tmp/a.csv", "type", "file", "size", (json_int_t)5000000000LL, "mode",
                          420, "permissions", "rw-r--r--", "owner", "user", "group", "user",
                          "modified", "2026-11-26T02:00:00Z");
    json_t *j = envd_entry(e);
    is_str(json_string_value(json_object_get(j, "type")), "FILE_TYPE_FILE", "type is the enum");
    is_str(json_string_value(json_object_get(j, "size")), "5000000000", "int64 size as a string");
    is_int(json_integer_value(json_object_get(j, "mode")), 420, "mode a number");
    is_str(json_string_value(json_object_get(j, "modifiedTime")), "2026-11-26T02:00:00Z",
           "modified is modifiedTime");
    ok(json_object_get(j, "symlinkTarget") == NULL, "no symlinkTarget for a file");
    is_str(json_string_value(json_object_get(j, "permissions")), "-rw-r--r--",
           "permissions as Go prints a FileMode: '-' for a file");
    json_decref(j);
    json_object_set_new(e, "type", json_string("symlink"));
    json_object_set_new(e, "symlink_target", json_string("/etc"));
    j = envd_entry(e);
    is_str(json_string_value(json_object_get(j, "type")), "FILE_TYPE_SYMLINK",
           "a link that leads nowhere: a symlink");
    is_str(json_string_value(json_object_get(j, "symlinkTarget")), "/etc", "its target");
    json_decref(j);
    json_object_set_new(e, "symlink_target", json_string("lib"));
    json_object_set_new(e, "target_type", json_string("dir"));
    json_object_set_new(e, "target_path", json_string("/usr/lib"));
    j = envd_entry(e);
    is_str(json_string_value(json_object_get(j, "type")), "FILE_TYPE_DIRECTORY",
           "a link to a directory: a directory, as envd says");
    is_str(json_string_value(json_object_get(j, "symlinkTarget")), "/usr/lib",
           "its target: the whole path it leads to");
    ok(json_object_get(j, "isSymlink") == NULL, "followed, as envd's stat follows it");
    is_str(json_string_value(json_object_get(j, "permissions")), "drw-r--r--",
           "... 'd' for a directory");
    json_decref(j);
    json_object_del(e, "target_type");
    json_object_del(e, "target_path");
    json_object_set_new(e, "type", json_string("dir"));
    json_object_set_new(e, "mode", json_integer(02770));
    json_object_set_new(e, "permissions", json_string("rwxrwx---"));
    j = envd_entry(e);
    is_str(json_string_value(json_object_get(j, "permissions")), "dgrwxrwx---",
           "... and a letter for each special bit (setgid: g)");
    json_decref(j);
    json_decref(e);
}

static void paths_and_bytes(void)
{
    char *p = envd_abspath("a/b");
    is_str(p, "/home/user/a/b", "a relative path is the home's");
    free(p);
    p = envd_abspath("/tmp/x");
    is_str(p, "/tmp/x", "an absolute path stays");
    free(p);
    p = envd_abspath("");
    is_str(p, "/home/user", "'' is the home");
    free(p);
    char *b = envd_b64("\x00\xff hi", 5);
    is_str(b, "AP8gaGk=", "bytes in standard base64");
    unsigned char *out;
    size_t n;
    ok(envd_unb64(b, &out, &n) == 0 && n == 5 && memcmp(out, "\x00\xff hi", 5) == 0, "and back");
    free(out);
    ok(envd_unb64("AP8gaGk", &out, &n) == 0 && n == 5, "padding optional");
    free(out);
    ok(envd_unb64("AP8_", &out, &n) == 0 && n == 3, "URL-safe taken");
    free(out);
    ok(envd_unb64("A!==", &out, &n) < 0, "not base64 refused");
    free(b);
    json_t *m = json_pack("{s:s}", "symlink_target", "x");
    is_str(envd_str(m, "symlinkTarget", "symlink_target"), "x", "a field by its proto name");
    json_decref(m);
}

int main(void)
{
    envelopes();
    codes();
    entries();
    paths_and_bytes();
    return tap_done();
}
