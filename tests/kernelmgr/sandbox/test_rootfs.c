/* --rootfs: a kernel runs on a separate image directory instead of the
 * minimal host-/usr root.  The image here is assembled for the test: its own
 * marker file, the host's /usr bind-mounted read-only, a generated /etc. */
#include "tests/lib/harness.h"

static bool ready_or_dead(void *arg)
{
    kernel_state_t s = kernel_state(arg);
    return s == KERNEL_IDLE || s == KERNEL_DEAD;
}

/* Runs a shell script with $D set to dir. */
static int sh(const char *script, const char *dir)
{
    setenv("D", dir, 1);
    return system(script);
}

int main(void)
{
    char dir[] = "/tmp/sg-rootfs-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    chmod(dir, 0711);
    loop = loop_new();
    proc_init(loop, NULL);
    sg_error_t *err = NULL;

    /* A default environment generates the /etc the image copies. */
    sandbox_config_t cfg;
    sandbox_config_defaults(&cfg);
    cfg.workspace_bytes = 0;
    cleanup_free char *gen = xasprintf("%s/gen", dir);
    sandbox_env_t *genv = sandbox_env_new(&cfg, gen, &err);
    ok(genv != NULL, "etc generated");
    sandbox_env_destroy(&genv);

    cleanup_free char *image = xasprintf("%s/image", dir);
    ok(sh("mkdir -p $D/usr $D/home/user $D/conn $D/tmp $D/proc $D/dev", image) == 0 &&
           sh("cd $D && ln -s usr/bin bin && ln -s usr/lib lib && ln -s usr/lib64 lib64 && "
              "touch sandgate-init && echo from-the-image > IMAGE-MARKER",
              image) == 0 &&
           sh("cp -a $D/../gen/sandbox/etc $D/etc", image) == 0 &&
           sh("mount --bind /usr $D/usr && mount -o remount,bind,ro $D/usr", image) == 0,
       "image directory assembled");

    cfg.rootfs = image;
    cleanup_free char *state = xasprintf("%s/state", dir);
    sandbox_env_t *env = sandbox_env_new(&cfg, state, &err);
    ok(env != NULL, "environment with --rootfs (%s)", err ? err->msg : "ok");
    kspecs_t *specs = kspecs_discover(NULL);
    cleanup_free char *ws = xasprintf("%s/ws", dir);
    sandbox_workspace_open(env, ws, &err);
    kernel_t *k = env ? kernel_start(loop, env, kspecs_get(specs, "python3"), "rootfs1", ws, NULL,
                                     NULL, NULL, &err)
                      : NULL;
    if (k)
        run_until(ready_or_dead, k, 60000);
    ok(k && kernel_state(k) == KERNEL_IDLE, "kernel ready on the image");
    result_t r;
    if (k) {
        run_code(k, "open('/IMAGE-MARKER').read().strip()", 0, 30000, &r);
        is_str(r_result(&r), "'from-the-image'", "the image is the kernel's /");
        result_clear(&r);
        kernel_shutdown(&k, true);
    }
    sandbox_workspace_close(env, ws, true);
    kspecs_destroy(&specs);
    sandbox_env_destroy(&env);
    sh("umount $D/usr", image);
    proc_fini();
    harness_fini();
    loop_destroy(&loop);
    cleanup_free char *rm = xasprintf("rm -rf '%s'", dir);
    ok(sh("grep -q $D/usr /proc/mounts", image) != 0 && system(rm) == 0, "cleaned up");
    return tap_done();
}
