/* auth: who may call, and how often — the auth room's face (rooms include
 * this header, not the ones below; docs/architecture.md).
 *
 *   keys.h       tenants and their API keys (--keys-file), `sandgate keys`
 *   authlimit.h  client addresses refused for a while after failing too often
 *   ratelimit.h  each tenant's requests a second (--tenant-max-rps)
 *
 * The HTTP server (gateway/http/) asks all three of every request; nothing
 * here knows HTTP.
 */
#ifndef SG_AUTH_H
#define SG_AUTH_H

#include "gateway/auth/authlimit.h"
#include "gateway/auth/keys.h"
#include "gateway/auth/ratelimit.h"

#endif
