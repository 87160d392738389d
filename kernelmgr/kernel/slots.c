/* slots: start slots (internal.h).  Sandbox starts are
 * CPU-heavy (Python's imports, or a restore loading a memory image):
 * running more at once than there are CPUs makes every one
 * slower, until they time out.  Starts beyond that wait here; the start
 * timeout runs from the real start. */
#include "kernelmgr/kernel/internal.h"

#include <unistd.h>

static int starts_active;
static kernel_t *waiting_head;

static int start_limit(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 2 ? 2 : (int)n;
}

bool take_slot(kernel_t *k)
{
    if (starts_active >= start_limit()) {
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
    while (waiting_head && starts_active < start_limit()) {
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
