/* observers: what every execution reports to besides its front end
 * (exec.h attaches both to each execution when it is created).
 *
 *  - the audit log (audit.h): "execute" or "command" when the execution is
 *    asked for, "execution.end" when it ends — however it ends, refused,
 *    cancelled and detached included — with the same fields and outcome
 *    names whichever front end asked (REST, MCP, a Jupyter WebSocket);
 *  - the metrics (metrics.h): sandgate_executions_total by kind and
 *    outcome, the duration of those that ran, truncations and artifacts.
 */
#ifndef SG_EXEC_OBSERVERS_H
#define SG_EXEC_OBSERVERS_H

#include "gateway/session/exec.h"

extern const exec_sink_t exec_audit_observer;
extern const exec_sink_t exec_metrics_observer;

#endif
