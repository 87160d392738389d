/* secrets: E2B's Secret API — values a tenant's sandboxes may use without
 * ever holding them (docs/api.md#secrets-secrets):
 *
 *   POST   /secrets                 {name, value, metadata}  201 Secret
 *   GET    /secrets                 ?limit, ?nextToken (X-Next-Token)
 *   GET    /secrets/{secret}        by id (sec_…) or name
 *   POST   /secrets/{secret}        {value, metadata}: a new version
 *   DELETE /secrets/{secret}        204
 *
 * No answer, log line or audit line carries a value.  A value is sealed
 * (libsodium's crypto_box_seal) to the server's sealing key as it arrives
 * and only the sealed bytes are kept, in STATE/secrets/secrets.json; the
 * key pair is made at the first start in STATE/sealing/ (0700), which is
 * root's when sandgate starts as root, so the serving process, which runs
 * without root, holds the public half only and cannot open what it keeps.
 * Each tenant's secrets are its own (another's id or name is unknown);
 * SECRETS_PER_TENANT at most. */
#ifndef SG_SECRETS_H
#define SG_SECRETS_H

#include <sodium.h>

#include "gateway/http/http.h"

#define SECRETS_PER_TENANT 256
#define SECRET_VALUE_MAX 65536

typedef struct secrets secrets_t;

/* The sealing key pair in STATE/sealing/key, made if missing: call it
 * before privileges go.  pk gets its public half. */
int secrets_sealing_key(const char *state_dir, unsigned char pk[crypto_box_PUBLICKEYBYTES],
                        sg_error_t **err);

secrets_t *secrets_new(const char *state_dir, const unsigned char pk[crypto_box_PUBLICKEYBYTES],
                       sg_error_t **err);
void secrets_destroy(secrets_t **self_p);
int secrets_register(secrets_t *self, http_server_t *http, sg_error_t **err);
/* Whether tenant has a secret named name (any case), as a network rule's
 * ${e2b.secrets.NAME} asks (api_network_secrets: self is the secrets_t). */
bool secrets_known(void *self, const char *tenant, const char *name);
/* changed(ctx, tenant) after each of tenant's secrets is made, updated or
 * deleted (the network rules that use them are applied again). */
void secrets_on_change(secrets_t *self, void (*changed)(void *ctx, const char *tenant), void *ctx);

#endif
