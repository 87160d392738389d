#include "common/replica.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char id_[REPLICA_ID_MAX + 1];
static char tag_[9];

bool replica_valid_id(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > REPLICA_ID_MAX)
        return false;
    for (const char *c = id; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '_' || *c == '-'))
            return false;
    return true;
}

int replica_init(const char *id, sg_error_t **err)
{
    char host[256] = "";
    if (id == NULL || *id == 0) {
        if (gethostname(host, sizeof host - 1) < 0)
            return sg_error_errno(err, errno, "--replica-id: no host name to default to");
        host[strcspn(host, ".")] = 0;
        host[REPLICA_ID_MAX] = 0;
        id = host;
    }
    if (!replica_valid_id(id))
        return sg_error_set(err, SG_E_INVALID,
                            "--replica-id: '%.80s' is not 1-63 of [A-Za-z0-9._-]", id);
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, (const unsigned char *)id, strlen(id));
    snprintf(id_, sizeof id_, "%s", id);
    snprintf(tag_, sizeof tag_, "%02x%02x%02x%02x", h[0], h[1], h[2], h[3]);
    return 0;
}

const char *replica_id(void)
{
    return id_;
}

const char *replica_tag(void)
{
    return tag_;
}

void uuid_v4(char out[37])
{
    unsigned char b[16];
    randombytes_buf(b, sizeof b);
    b[6] = (b[6] & 0x0f) | 0x40; /* version 4 */
    b[8] = (b[8] & 0x3f) | 0x80; /* RFC 4122 variant */
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

void replica_uuid(char out[37])
{
    uuid_v4(out);
    if (tag_[0])
        memcpy(out, tag_, 8);
}
