/* proto: the Jupyter wire protocol over ZeroMQ — the proto room's face
 * (rooms include this header, not the ones below; docs/architecture.md).
 *
 *   jmsg.h      one message: header, parent, metadata, content, buffers
 *   jsession.h  its signed wire form: encode, and decode with verification
 *   jconn.h     connection files
 *   jclient.h   the client's five channels to a kernel
 *
 * Nothing here knows sandboxes or HTTP.
 */
#ifndef SG_PROTO_H
#define SG_PROTO_H

#include "proto/jclient.h"
#include "proto/jconn.h"
#include "proto/jmsg.h"
#include "proto/jsession.h"

#endif
