/* slots: start slots (internal.h).  A fresh sandbox's start is CPU-heavy
 * (Python's imports): running more at once than there are CPUs makes every
 * one slower, until they time out.  A start from a snapshot is not: a
 * modern runsc restores in the background, reading memory in as it is
 * touched, and mostly waits — eight restores of one image at once, bare,
 * all answer in ~1.6 s on 2 CPUs, two at a time in ~1.9 s
 * (bench/runtime.py --state-only).  So with such a runsc (one that can
 * save a running sandbox) restores may run up to RESTORE_SLOTS per CPU,
 * fresh starts one per CPU, counted together.  runsc 2022-12-19
 * decompresses the whole image at once: more than one per CPU made eight
 * finish later (docs/architecture.md, Start slots).
 * Starts beyond that wait here, in order; the start timeout runs from the
 * real start. */
#include "kernelmgr/kernel/internal.h"

#include <unistd.h>

static int starts_active;
static kernel_t *waiting_head;

#define RESTORE_SLOTS 4

static int start_limit(const kernel_t *k)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    n = n < 2 ? 2 : n;
    return (int)(k->from_snapshot && sandbox_env_can_save_live(k->env) ? n * RESTORE_SLOTS : n);
}

bool take_slot(kernel_t *k)
{
    if (waiting_head || starts_active >= start_limit(k)) {
        kernel_t **p = &waiting_head;
        while (*p)
            p = &(*p)->next_waiting;
        *p = k;
        k->next_waiting = NULL;
        k->waiting_slot = true;
        return false;
    }
    k->holds_slot = true;
    starts_active++;
    return true;
}

void release_slot(kernel_t *k)
{
    if (k->waiting_slot) {
        for (kernel_t **p = &waiting_head; *p; p = &(*p)->next_waiting)
            if (*p == k) {
                *p = k->next_waiting;
                break;
            }
        k->waiting_slot = false;
    }
    if (!k->holds_slot)
        return;
    k->holds_slot = false;
    starts_active--;
    while (waiting_head && starts_active < start_limit(waiting_head)) {
        kernel_t *next = waiting_head;
        waiting_head = next->next_waiting;
        next->waiting_slot = false;
        next->holds_slot = true;
        starts_active++;
        sg_error_t *err = NULL;
        if (launch_now(next, &err) < 0) {
            die(next, err);
            sg_error_free(&err);
        }
    }
}
