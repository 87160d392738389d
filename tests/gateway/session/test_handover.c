/* handover: which --notebook-url templates are taken, and the link made of one. */
#include <stdlib.h>

#include "gateway/session/handover.h"
#include "tests/lib/tap.h"

int main(void)
{
    ok(handover_valid("https://hub.example.org/user/alice/lab?kernel={kernel_id}"),
       "an https URL holding {kernel_id} is a template");
    ok(handover_valid("HTTP://127.0.0.1:8888/lab/tree/{kernel_id}.ipynb"),
       "so is an http one (the scheme in any case)");
    ok(!handover_valid("https://hub.example.org/lab"), "not without {kernel_id}");
    ok(!handover_valid("ftp://hub.example.org/{kernel_id}"), "not another scheme");
    ok(!handover_valid("hub.example.org/{kernel_id}"), "not without a scheme");
    ok(!handover_valid("https:///{kernel_id}") && !handover_valid("https://?k={kernel_id}"),
       "not without a host");
    ok(!handover_valid("https://hub.example.org/a b/{kernel_id}") &&
           !handover_valid("https://hub.example.org/\n{kernel_id}"),
       "not with a space or a control character");
    ok(!handover_valid("https://hub.example.org/{kernel}"), "not with another placeholder only");

    char *url = handover_url("https://h/lab?kernel={kernel_id}", "r1-5c7b");
    is_str(url, "https://h/lab?kernel=r1-5c7b", "the id in place of {kernel_id}");
    free(url);
    url = handover_url("https://h/{kernel_id}/x?k={kernel_id}", "abc");
    is_str(url, "https://h/abc/x?k=abc", "in place of each");
    free(url);
    url = handover_url("https://h/{kernel_id}", "a-much-longer-id-than-the-placeholder-0123");
    is_str(url, "https://h/a-much-longer-id-than-the-placeholder-0123",
           "an id longer than the placeholder");
    free(url);
    ok(handover_url(NULL, "abc") == NULL, "no template: no link");
    return tap_done();
}
