/* session: what every front end does with a session, in one place — the
 * session room's face (rooms include this header, not the ones below;
 * docs/architecture.md).
 *
 *   exec.h       one execution of code or a command: its queue, output,
 *                limits, timeout and outcome, for REST, MCP and WebSockets
 *                (observers.h: the audit log and metrics each one reports to)
 *   pyscript.h   the Python sandgate itself runs in kernels (py/)
 *   envscript.h  env_vars in the other kernels' languages (Java's as
 *                system properties: also a Java context's start, rest.c)
 *   handover.h   the link that hands a session over to a person
 *                (--notebook-url)
 */
#ifndef SG_SESSION_H
#define SG_SESSION_H

#include "gateway/session/envscript.h"
#include "gateway/session/exec.h"
#include "gateway/session/handover.h"
#include "gateway/session/pyscript.h"

#endif
