/* observe: what the daemon tells its operator — the observe room's face
 * (rooms include this header, not the ones below; docs/architecture.md).
 *
 *   audit.h    the audit log: what ran, for whom, when (--audit-log)
 *   metrics.h  the counters and histograms of GET /metrics, and the
 *              helpers that write the page's families
 *
 * The room knows neither kernels nor tenants: the rooms that do write their
 * own families of the page (gateway/rest/metrics.c puts it together).
 */
#ifndef SG_OBSERVE_H
#define SG_OBSERVE_H

#include "gateway/observe/audit.h"
#include "gateway/observe/metrics.h"

#endif
