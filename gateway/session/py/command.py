# A shell command, run in the context's sandbox through its kernel
# (gateway/session/exec.c).  sandgate sets _sandgate_cmd (the command) and
# _sandgate_limit (bytes kept of each stream) on the lines before this text.
#
# The runner starts the command in a new session (so a timeout's interrupt
# kills the whole process group), reads at most limit bytes of each stream
# and drains the rest, and reports {stdout, stderr, exit_code} as JSON on
# its own stdout.
def _sandgate_command(cmd, limit):
    import json, os, selectors, signal, subprocess, sys
    p = subprocess.Popen(['/bin/sh', '-c', cmd], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    got = {p.stdout: bytearray(), p.stderr: bytearray()}
    over = set()
    try:
        sel = selectors.DefaultSelector()
        for f in got: sel.register(f, selectors.EVENT_READ)
        while sel.get_map():
            for key, _ in sel.select():
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = got[key.fileobj]
                room = max(limit - len(buf), 0)
                buf += chunk[:room]
                if len(chunk) > room: over.add(key.fileobj)
        p.wait()
    except BaseException:
        try: os.killpg(p.pid, signal.SIGKILL)
        except OSError: pass
        p.wait()
        raise
    def text(f):
        t = got[f].decode('utf-8', 'replace')
        if f in over: t += '\n[sandgate: output limit of %d bytes reached; the rest is dropped]\n' % limit
        return t
    rc = p.returncode if p.returncode >= 0 else 128 - p.returncode
    sys.stdout.write(json.dumps({'stdout': text(p.stdout), 'stderr': text(p.stderr),
                                 'exit_code': rc}))
    sys.stdout.flush()
try:
    _sandgate_command(_sandgate_cmd, _sandgate_limit)
finally:
    del _sandgate_command, _sandgate_cmd, _sandgate_limit
