"""sandgate-kernel.py: how sandgate starts ipykernel inside a gVisor sandbox.

The kernelspec's `python3 -m ipykernel_launcher -f FILE` becomes
`python3 /sandgate-kernel.py -f FILE`: this file adjusts ipykernel for a
sandbox that can be paused (`runsc checkpoint`), then runs
ipykernel_launcher exactly as `-m` would.

ipykernel listens on a loopback TCP port for the output of forked
subprocesses (IOPubThread's "pipe").  runsc cannot save a listening TCP
socket that is being polled, and a failed checkpoint ends the sandbox; the
same pipe over an abstract Unix socket (the sandbox's own, like the
kernel's channels) is saved and restored like any other.  Nothing else
changes: forked children's output still reaches the notebook.

Under the ptrace platform every system call and every hand-off between
threads is expensive, and ipykernel hands each output message, and each
flush of stdout/stderr (six per execute, most with nothing to flush), from
the thread that made it to its IOPub thread and waits.  _direct_iopub()
sends from the calling thread instead whenever nothing is queued for the
IOPub thread, under one lock that every send of the IOPub socket holds, so
messages keep their order and the socket is never used by two threads at
once; the IOPub thread still runs timed flushes (output streamed while code
runs) and subprocess output.  Messages, their order and the flush
guarantees are the same as before.

What a subprocess writes to the kernel's stdout/stderr descriptors reaches
the stream through ipykernel's pipe-watching thread; stock ipykernel's slow
flush usually gave that thread time to catch up before the result was sent,
but nothing made it.  _ordered_fd_output() makes it so: the watcher reads
only under a lock, without blocking, and every flush first takes what is
in the pipe, so output written before a flush is in that flush.

Two more hand-offs and system calls per execute go the same way, and a
third: _direct_replies() sends a reply on a ROUTER socket (shell,
control) at once when the stream has nothing queued and the call comes from
the stream's own event loop, instead of queueing it for the loop's next
turn (a ROUTER send never blocks; nothing in ipykernel waits on a send
callback).
_lazy_control_flush() skips the round trip to the control thread that
ipykernel makes before each shell request ("process the control messages
that came first") when none came: none is queued or being handled, and the
control socket has nothing unread (one poll(2) of its descriptor).
_cached_pid() answers the fork checks of jupyter_client's Session (two per
message) and of the IOPub thread from a pid kept current across os.fork(),
not with a getpid(2) each.  _log_level() sets the level of ipykernel's
logger to that of its handler (traitlets leaves the logger at DEBUG, so
four log records that nobody prints, each with a getpid(2), were made per
request).  OutStream.write keeps its own getpid: a loop that
only prints must still enter the Sentry now and then, or under the ptrace
platform the threads that flush its output starve (a 64 MiB print loop then
stalls).

The Bash kernel (bash_kernel, ipykernel-based) comes here too:
`python3 -m bash_kernel -f FILE` becomes `python3 /sandgate-kernel.py -m
bash_kernel -f FILE`, with the same adjustments and one of its own,
_bash_interrupt(): bash_kernel interrupts a command by writing ^C to bash's
pseudo-terminal, and gVisor's terminal (2022-12-19) sends no signal for it,
so `sleep 1000` would run on and a timeout would end in a restart.  Its bash
runs without job control (`set +m`), so a foreground command stays in bash's
process group (and background jobs ignore SIGINT, as in any shell without
job control), and an interrupt is a SIGINT to that group.

Python kernels also get E2B's two rich formats, _register_rich_formats():
IPython formatters for "e2b/chart" (a matplotlib Figure's data, in the shape
E2B's SDKs read as result.chart) and "e2b/data" (a pandas DataFrame's
columns), which POST /execute turns into a result's `chart` and `data`.
They run only for an execute_request whose metadata asks for them (_asked),
and import nothing: each looks for its class among the modules the code
already imported.  docs/api.md describes the shapes, and why this is not the
e2b-charts package.  For the same requests a PIL image that the code shows
or saves to a file is displayed, as in E2B's sandbox (_pil_display), by a
patch applied when the code imports PIL (_OnImport), not at start.

Everything here is guarded: with an ipykernel whose internals differ, the
kernel runs unchanged (and a pause then fails cleanly before the
checkpoint: sandgate-init refuses to detach while TCP sockets exist).
"""
import codecs
import os
import runpy
import select
import signal
import sys
import threading
import weakref

_pid = [os.getpid()]  # this process's pid, kept current across os.fork()
os.register_at_fork(after_in_child=lambda: _pid.__setitem__(0, os.getpid()))


def _abstract_pipe():
    try:
        from ipykernel import iostream
    except Exception:  # no ipykernel: runpy below reports it
        return
    thread = getattr(iostream, "IOPubThread", None)
    if thread is None or not hasattr(thread, "_setup_pipe_in") or \
            not hasattr(thread, "_setup_pipe_out") or not hasattr(thread, "_handle_pipe_msg"):
        return
    zmq, stream = iostream.zmq, iostream.ZMQStream

    def _setup_pipe_in(self):
        ctx = self.socket.context
        self._pipe_uuid = os.urandom(16)
        pipe_in = ctx.socket(zmq.PULL)
        pipe_in.linger = 0
        self._pipe_endpoint = "ipc://@sandgate-iopub-pipe-%d-%s" % (os.getpid(),
                                                                   os.urandom(6).hex())
        try:
            pipe_in.bind(self._pipe_endpoint)
        except zmq.ZMQError as e:
            print("sandgate-kernel: no pipe for subprocess output: %s" % e, file=sys.__stderr__)
            self._pipe_flag = False
            pipe_in.close()
            return
        self._pipe_in = stream(pipe_in, self.io_loop)
        self._pipe_in.on_recv(self._handle_pipe_msg)

    def _setup_pipe_out(self):
        ctx = zmq.Context()  # a new context after fork
        pipe_out = ctx.socket(zmq.PUSH)
        pipe_out.linger = 3000
        pipe_out.connect(self._pipe_endpoint)
        return ctx, pipe_out

    thread._setup_pipe_in = _setup_pipe_in
    thread._setup_pipe_out = _setup_pipe_out


def _direct_iopub():
    try:
        from ipykernel import iostream
    except Exception:
        return
    thread, out = getattr(iostream, "IOPubThread", None), getattr(iostream, "OutStream", None)
    need_t = ("__init__", "_handle_event", "_really_send", "_event_pipe", "_is_master_process")
    need_o = ("flush", "_flush", "_is_master_process")
    if thread is None or out is None or not all(hasattr(thread, a) for a in need_t) or \
            not all(hasattr(out, a) for a in need_o):
        return
    threads = weakref.WeakSet()
    orig_init, orig_handle_event = thread.__init__, thread._handle_event
    orig_flush, orig_flush_now = out.flush, out._flush

    def __init__(self, *args, **kwargs):
        self._sg_lock = threading.RLock()
        orig_init(self, *args, **kwargs)
        threads.add(self)

    def _reset_locks():  # a fork may happen while another thread holds one
        for t in threads:
            t._sg_lock = threading.RLock()

    def _handle_event(self, msg):
        with self._sg_lock:
            orig_handle_event(self, msg)

    def _live(t):
        return getattr(t, "_events", None) is not None and t.thread.is_alive() and \
            _pid[0] == getattr(t, "_master_pid", None)

    def send_multipart(self, *args, **kwargs):
        if not _live(self):
            self._really_send(*args, **kwargs)  # as schedule() does with no thread
            return
        with self._sg_lock:
            if not self._events:
                self._really_send(*args, **kwargs)
                return
            self._events.append(lambda: self._really_send(*args, **kwargs))
            self._event_pipe.send(b"")

    def _flush(self):
        t = self.pub_thread
        lock = getattr(t, "_sg_lock", None)
        if lock is None:
            return orig_flush_now(self)
        with lock:
            return orig_flush_now(self)

    def flush(self):
        _drain_fd(self)
        t = self.pub_thread
        if t is not None and getattr(t, "_sg_lock", None) is not None and _live(t) and \
                _pid[0] == getattr(self, "_master_pid", None):
            with t._sg_lock:
                if not t._events:
                    self._flush()
                    return
        orig_flush(self)

    thread.__init__, thread._handle_event, thread.send_multipart = (__init__, _handle_event,
                                                                   send_multipart)
    out.flush, out._flush = flush, _flush
    os.register_at_fork(after_in_child=_reset_locks)


def _drain_fd(stream):
    """Move what was written to the stream's file descriptor (by a
    subprocess, or C code) and not yet read into the stream's buffer."""
    lock = getattr(stream, "_sg_fd_lock", None)
    if lock is not None and getattr(stream, "_sg_fd_ready", False):
        with lock:
            _read_fd(stream)


def _read_fd(stream):  # the caller holds stream._sg_fd_lock
    while True:
        try:
            data = os.read(stream._fid, 65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        stream.write(stream._sg_fd_decoder.decode(data))
        os.write(stream._original_stdstream_copy, data)


def _ordered_fd_output():
    try:
        from ipykernel import iostream
    except Exception:
        return
    out = getattr(iostream, "OutStream", None)
    if out is None or not all(hasattr(out, a) for a in ("_watch_pipe_fd",
                                                         "_setup_stream_redirects")):
        return
    orig_setup = out._setup_stream_redirects

    def _setup_stream_redirects(self, name):
        self._sg_fd_lock = threading.Lock()
        self._sg_fd_decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return orig_setup(self, name)

    def _watch_pipe_fd(self):
        try:
            os.set_blocking(self._fid, False)
            self._sg_fd_ready = True
            poller = select.poll()
            poller.register(self._fid, select.POLLIN)
            while self._should_watch:
                poller.poll()
                with self._sg_fd_lock:
                    if not _read_fd(self):
                        return
        except Exception:
            self._exc = sys.exc_info()

    out._setup_stream_redirects, out._watch_pipe_fd = _setup_stream_redirects, _watch_pipe_fd


def _lazy_control_flush():
    try:
        from ipykernel import kernelbase
    except Exception:
        return
    kernel = getattr(kernelbase, "Kernel", None)
    if kernel is None or not all(hasattr(kernel, a) for a in (
            "_flush_control_queue", "dispatch_control", "process_control")):
        return
    orig_flush, orig_dispatch, orig_process = (kernel._flush_control_queue,
                                               kernel.dispatch_control, kernel.process_control)

    def dispatch_control(self, msg):  # control thread: a message arrived
        self._sg_control_in = getattr(self, "_sg_control_in", 0) + 1
        return orig_dispatch(self, msg)

    async def process_control(self, msg):
        try:
            return await orig_process(self, msg)
        finally:
            self._sg_control_done = getattr(self, "_sg_control_done", 0) + 1

    async def _flush_control_queue(self):
        if getattr(self, "control_thread", None) is not None and \
                getattr(self, "_sg_control_in", 0) == getattr(self, "_sg_control_done", 0):
            poller = getattr(self, "_sg_control_poller", None)
            if poller is None:
                try:
                    poller = select.poll()
                    poller.register(self.control_stream.socket.FD, select.POLLIN)
                except Exception:
                    poller = False
                self._sg_control_poller = poller
            if poller and not poller.poll(0):
                return None
        return await orig_flush(self)

    kernel.dispatch_control, kernel.process_control = dispatch_control, process_control
    kernel._flush_control_queue = _flush_control_queue


def _direct_replies():
    try:
        import asyncio
        import zmq
        from zmq.eventloop import zmqstream
    except Exception:
        return
    stream = getattr(zmqstream, "ZMQStream", None)
    if stream is None or not all(hasattr(stream, a) for a in ("send_multipart", "sending",
                                                              "_send_callback")):
        return
    orig_send = stream.send_multipart

    def send_multipart(self, msg, flags=0, copy=True, track=False, callback=None, **kwargs):
        sock = self.socket
        if callback is None and not kwargs and self._send_callback is None and \
                sock is not None and sock.type == zmq.ROUTER and not self.sending():
            try:
                on_loop = asyncio.get_running_loop() is self.io_loop.asyncio_loop
            except (RuntimeError, AttributeError):
                on_loop = False
            if on_loop:
                try:
                    sock.send_multipart(msg, flags=flags | zmq.NOBLOCK, copy=copy, track=track)
                    return
                except zmq.Again:
                    pass
        return orig_send(self, msg, flags, copy, track, callback, **kwargs)

    stream.send_multipart = send_multipart


def _cached_pid():
    try:
        from jupyter_client import session
        from ipykernel import compiler, iostream
    except Exception:
        return

    class _OS:  # a module's `os`, with a getpid that needs no system call
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def getpid():
            return _pid[0]

    for module in (session, compiler):
        if getattr(module, "os", None) is os:
            module.os = _OS()
    thread = getattr(iostream, "IOPubThread", None)
    if thread is not None and hasattr(thread, "_is_master_process"):
        thread._is_master_process = lambda self: _pid[0] == self._master_pid


def _log_level():
    try:
        from ipykernel.kernelapp import IPKernelApp
    except Exception:
        return
    orig = getattr(IPKernelApp, "get_default_logging_config", None)
    if orig is None:
        return

    def get_default_logging_config(self):
        config = orig(self)
        try:
            level = config["handlers"]["console"]["level"]
            config["loggers"][self.__class__.__name__]["level"] = level
        except (KeyError, TypeError):
            pass
        return config

    IPKernelApp.get_default_logging_config = get_default_logging_config


def _bash_interrupt():
    try:
        from bash_kernel import kernel
    except Exception:
        return
    bash = getattr(kernel, "BashKernel", None)
    orig_start = getattr(bash, "_start_bash", None)
    if orig_start is None:
        return

    def _start_bash(self):
        orig_start(self)
        wrapper = getattr(self, "bashwrapper", None)
        child = getattr(wrapper, "child", None)
        if child is None or not hasattr(wrapper, "run_command"):
            return
        wrapper.run_command("set +m")
        orig_intr = child.sendintr

        def sendintr():
            try:
                os.killpg(child.pid, signal.SIGINT)  # bash leads its session and group
            except OSError:
                orig_intr()

        child.sendintr = sendintr

    bash._start_bash = _start_bash


# --- E2B's rich formats: "e2b/chart" (a matplotlib Figure's data) and "e2b/data" (a
# pandas DataFrame's columns), as E2B's own sandbox registers them.  Written here
# rather than taken from e2b-charts, which needs numpy >= 2.2.6, matplotlib >= 3.10
# and pydantic 2 (Debian 12 has 1.24, 3.6 and 1.10).  Nothing is imported until an
# object of one of those libraries is displayed.

def _json_safe(v):
    try:
        if hasattr(v, "item") and not isinstance(v, (list, tuple, dict, str)):
            v = v.item()
    except Exception:
        pass
    if isinstance(v, float) and v != v or v in (float("inf"), float("-inf")):
        return None
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def _number(f):  # NaN and infinities have no JSON: null
    return None if f != f or f in (float("inf"), float("-inf")) else f


def _value(v):
    """A point's or tick's coordinate as E2B gives it: a date as its ISO
    string, a number as a float, a category as its string."""
    import datetime
    if isinstance(v, datetime.date):  # and datetime, pandas' Timestamp
        return v.isoformat()
    np = sys.modules.get("numpy")
    if np is not None and isinstance(v, np.datetime64):
        return str(v.astype("datetime64[s]"))
    if isinstance(v, str):
        return str(v)
    try:
        return _number(float(v))
    except (TypeError, ValueError):
        return str(v)


def _values(data):
    np = sys.modules.get("numpy")
    if np is not None:  # numbers in bulk: a line can have a million points
        a = np.asarray(data)
        if a.dtype.kind in "biuf":
            return [_number(f) for f in a.astype(float).ravel().tolist()]
    return [_value(v) for v in data]


def _points(xs, ys):
    return [list(p) for p in zip(_values(xs), _values(ys))]


def _text(s):  # an empty title or label is null, as in E2B's charts
    return str(s) if s else None


def _label_unit(label):
    """E2B's unit of an axis label: the first "(unit)" after a space, or
    "[unit]"; the label keeps it ("Time (s)": "s")."""
    import re
    m = re.search(r"\s\((.*?)\)|\[(.*?)\]", label or "")
    return (m.group(1) or m.group(2)) if m else None


def _axes_2d(ax):
    xl, yl = _text(ax.get_xlabel()), _text(ax.get_ylabel())
    return {"title": _text(ax.get_title()), "x_label": xl, "x_unit": _label_unit(xl),
            "y_label": yl, "y_unit": _label_unit(yl)}


def _is_date_axis(axis):
    from matplotlib import dates
    conv = getattr(dates, "_SwitchableDateConverter", None) or dates.DateConverter
    return isinstance(getattr(axis, "converter", None), conv)


def _ticks(ax, d):
    """Ticks, tick labels and scale of each axis, as E2B gives them: a date
    axis has ISO strings for ticks and scale "datetime"; a linear axis whose
    ticks are 0, 1, 2… labelled otherwise (strings plotted) is "categorical"."""
    for a, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
        labels = [t.get_text() for t in axis.get_ticklabels()]
        locs, scale = axis.get_ticklocs(), axis.get_scale()
        if _is_date_axis(axis):
            from matplotlib.dates import num2date
            ticks, scale = [num2date(t).isoformat() for t in locs], "datetime"
        else:
            ticks = _values(locs)
            if scale == "linear" and all(isinstance(t, float) and t == i and str(i) != lab
                                         for i, (t, lab) in enumerate(zip(ticks, labels))):
                scale = "categorical"
        d[a + "_ticks"], d[a + "_tick_labels"], d[a + "_scale"] = ticks, labels, scale
    return d


def _is_grid_line(line):  # a horizontal or vertical line of two points (axhline, axvline)
    xs, ys = line.get_xdata(), line.get_ydata()
    return len(xs) == 2 and len(ys) == 2 and (xs[0] == xs[1] or ys[0] == ys[1])


def _tick_label_at(ax, x, axis=None):
    axis = axis or ax.xaxis
    for loc, lab in zip(axis.get_ticklocs(), axis.get_ticklabels()):
        if abs(loc - x) < 1e-9:
            return lab.get_text()
    return str(_json_safe(x))


def _bar_chart(ax, bars):
    """Bars as E2B charts them: x is the axis of the categories (swapped
    with y for barh), an unlabelled series is "Group N"."""
    elements, horizontal = [], False
    for c in bars:
        group = str(c.get_label())
        if group.startswith("_container"):
            group = "Group " + group[len("_container"):]
        horizontal = getattr(c, "orientation", "vertical") == "horizontal"
        for r in c.patches:
            if horizontal:
                at, axis, value = r.get_y() + r.get_height() / 2, ax.yaxis, r.get_width()
            else:
                at, axis, value = r.get_x() + r.get_width() / 2, ax.xaxis, r.get_height()
            elements.append({"label": _tick_label_at(ax, at, axis), "group": group,
                             "value": _value(value)})
    chart = _axes_2d(ax)
    if horizontal:
        chart = {k.replace("x_", "t_").replace("y_", "x_").replace("t_", "y_"): v
                 for k, v in chart.items()}
    return dict(chart, type="bar", elements=elements)


def _floats(data):  # a line's data as floats; None if it is not numbers (dates, strings)
    if any(isinstance(v, str) for v in data):
        return None
    try:
        return [float(v) for v in data]
    except (TypeError, ValueError):
        return None


def _box_outline(line):
    """(xs, ys) of a line that outlines a box as a box plot draws it without
    patch_artist: five points, the last the first, each side along one
    axis, two distinct x and two distinct y.  None for any other line, a
    line plot of five points among them."""
    if line.get_linestyle() == "None" or len(line.get_xdata()) != 5 or \
            len(line.get_ydata()) != 5:
        return None
    xs, ys = _floats(line.get_xdata()), _floats(line.get_ydata())
    if xs is None or ys is None:
        return None
    pts = list(zip(xs, ys))
    if pts[0] != pts[4] or len(set(xs)) != 2 or len(set(ys)) != 2 or \
            any((a[0] != b[0]) == (a[1] != b[1]) for a, b in zip(pts, pts[1:])):
        return None
    return xs, ys


def _box_chart(ax, lines, lines_only):
    """A box plot's boxes: closed outlines (_box_outline) or, with
    patch_artist=True, PathPatches (their paths are in data coordinates),
    each with the median, whiskers and fliers drawn across it.  With
    lines_only (an axes of nothing but lines, which E2B charts as lines),
    every box needs its median, or this is no box plot."""
    from matplotlib.patches import PathPatch
    outlines = {l: _box_outline(l) for l in lines}
    boxes = [b for b in outlines.values() if b is not None]
    for p in ax.patches:
        if isinstance(p, PathPatch) and p.get_transform() == ax.transData:
            v = p.get_path().vertices
            if len(v) >= 4:
                boxes.append(([float(x) for x in v[:, 0]], [float(y) for y in v[:, 1]]))
    if not boxes:
        return None
    rest = []  # the other lines of numbers: medians, whiskers, caps, fliers
    for l in lines:
        xs, ys = (None, None) if outlines[l] else (_floats(l.get_xdata()),
                                                   _floats(l.get_ydata()))
        if xs and ys:
            rest.append((l.get_linestyle() != "None", xs, ys))
    elements = []
    for xs, ys in sorted(boxes, key=lambda b: min(b[0])):
        x0, x1 = min(xs), max(xs)
        near = [(drawn, lx, ly) for drawn, lx, ly in rest
                if all(x0 - 1e-9 <= x <= x1 + 1e-9 for x in lx)]
        med = [ly[0] for drawn, lx, ly in near
               if drawn and len(ly) == 2 and ly[0] == ly[1] and min(ys) <= ly[0] <= max(ys)]
        if lines_only and not med:
            return None
        ends = [y for drawn, lx, ly in near if drawn for y in ly]
        fliers = [y for drawn, lx, ly in near if not drawn for y in ly]
        elements.append({"label": _tick_label_at(ax, (x0 + x1) / 2), "min": min(ends + ys),
                         "first_quartile": min(ys), "median": med[0] if med else None,
                         "third_quartile": max(ys), "max": max(ends + ys),
                         "outliers": fliers})
    return dict(_axes_2d(ax), type="box_and_whisker", elements=elements)


def _pie_angle(w):
    """A wedge's angle as E2B rounds it: to 8 significant digits less the
    angle's magnitude (324, not the 323.99999141693115 of float32 thetas)."""
    from decimal import Decimal, localcontext
    d = Decimal(str(Decimal(float(w.theta2)) - Decimal(float(w.theta1))))
    with localcontext() as ctx:
        ctx.prec = max(1, 8 - d.adjusted())
        return abs(float(+d))


def _axes_kind(ax):
    """An axes' chart type as E2B decides it, from the kinds of its artists
    (texts aside): only lines is "line"; only PathPatches and lines a box
    plot; then, horizontal and vertical two-point lines aside (axhline),
    only scatter collections "scatter", only wedges "pie", only rectangles
    "bar"; anything else (a mix, circles, an image) "unknown"."""
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge
    from matplotlib.text import Text
    children = getattr(ax, "_children", None)
    if children is None:  # matplotlib < 3.5
        children = [*ax.lines, *ax.patches, *ax.collections, *ax.images, *ax.artists]
    objects = [a for a in children if not isinstance(a, Text)]
    if all(isinstance(a, Line2D) for a in objects):
        return "line"
    if all(isinstance(a, (PathPatch, Line2D)) for a in objects):
        return "box_and_whisker"
    objects = [a for a in objects if not (isinstance(a, Line2D) and _is_grid_line(a))]
    for kind, cls in (("scatter", PathCollection), ("pie", Wedge), ("bar", Rectangle)):
        if all(isinstance(a, cls) for a in objects):
            return kind
    return "unknown"


def _axes_chart(ax):
    from matplotlib.container import BarContainer
    kind, lines = _axes_kind(ax), ax.get_lines()
    if kind in ("line", "box_and_whisker"):
        # E2B charts a box plot drawn without patch_artist (lines only) as
        # lines; sandgate finds its boxes.
        box = _box_chart(ax, lines, kind == "line")
        if box is not None:
            return box
    if kind == "line":
        elements = []
        for l in lines:
            if _is_grid_line(l):
                continue
            label = str(l.get_label())
            if label.startswith("_child") and label[6:].isdigit():
                label = "Line " + label[6:]
            elements.append({"label": label, "points": _points(l.get_xdata(), l.get_ydata())})
        return _ticks(ax, dict(_axes_2d(ax), type="line", elements=elements))
    if kind == "scatter":
        elements = [{"label": str(c.get_label()),
                     "points": _points(c.get_offsets()[:, 0], c.get_offsets()[:, 1])}
                    for c in ax.collections]
        return _ticks(ax, dict(_axes_2d(ax), type="scatter", elements=elements))
    if kind == "pie":
        return {"type": "pie", "title": _text(ax.get_title()),
                "elements": [{"label": str(w.get_label()), "angle": _pie_angle(w),
                              "radius": float(w.r)} for w in ax.patches]}
    if kind == "bar":
        return _bar_chart(ax, [c for c in ax.containers if isinstance(c, BarContainer)])
    return {"type": "unknown", "title": _text(ax.get_title()), "elements": []}


def _any_chart(ax):  # an axes whose extraction fails is still there, as "unknown"
    try:
        return _axes_chart(ax)
    except Exception:
        return {"type": "unknown", "title": _text(ax.get_title()), "elements": []}


def _figure_chart(fig):
    """A figure with something drawn: its one axes' chart, or with several
    a "superchart" of one chart per axes, titled by the suptitle."""
    axes = fig.get_axes()
    if not any(ax.has_data() for ax in axes):
        return None
    if len(axes) == 1:
        return _any_chart(axes[0])
    title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else ""
    return {"type": "superchart", "title": title, "elements": [_any_chart(ax) for ax in axes]}


def _frame_data(df):
    return {str(k): [_json_safe(v) for v in vs] for k, vs in df.to_dict(orient="list").items()}


def _asked(shell):
    """Whether the execute_request being run asks for E2B's formats: its
    metadata says {"sandgate": {"rich_formats": true}}, which sandgate sends
    for the REST API, E2B's /execute and MCP (--rich-formats, the request's
    "rich_formats").  A Jupyter frontend's requests do not, so JupyterLab's
    results are what they always were and cost nothing more."""
    try:
        meta = shell.kernel.get_parent("shell").get("metadata") or {}
        return (meta.get("sandgate") or {}).get("rich_formats") is True
    except Exception:
        return False


def _rich_formats(shell):
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    def formatter(mime, module, name, extract):
        class Formatter(BaseFormatter):  # only for instances of module.name, if imported
            format_type = Unicode(mime)
            print_method = ObjectName("_repr_%s_" % mime.replace("/", "_"))

            def __call__(self, obj):
                if not _asked(shell):
                    return None
                mod = sys.modules.get(module)
                cls = getattr(mod, name, None) if mod is not None else None
                if cls is None or not isinstance(obj, cls):
                    return None
                try:
                    return extract(obj)
                except Exception:
                    return None

        return Formatter(parent=shell.display_formatter)

    formatters = shell.display_formatter.formatters
    formatters["e2b/chart"] = formatter("e2b/chart", "matplotlib.figure", "Figure",
                                        _figure_chart)
    formatters["e2b/data"] = formatter("e2b/data", "pandas", "DataFrame", _frame_data)
    _pil_display(shell)


class _OnImport:
    """A sys.meta_path finder that runs hooks[name](module) once the module
    named is imported (executed), so that patching a library costs nothing
    until the code imports it.  For any other name it answers at once, with
    nothing."""

    def __init__(self, hooks):
        self.hooks = hooks

    def find_spec(self, name, path=None, target=None):
        hook = self.hooks.get(name)
        if hook is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        orig_exec = getattr(spec.loader, "exec_module", None)
        if orig_exec is None:
            return spec

        def exec_module(module):
            orig_exec(module)
            try:
                hook(module)
            except Exception as e:
                print("sandgate-kernel: %s not adjusted: %s" % (name, e), file=sys.__stderr__)

        spec.loader.exec_module = exec_module  # this module's own loader
        return spec


def _pil_display(shell):
    """E2B's sandbox displays a PIL image that the code shows (Image.show())
    or saves to a file named by a string (Image.save("a.png"), and so
    plt.savefig("a.png"), which saves through PIL): a display_data with its
    image/png.  Without it show() runs xdg-open, which a sandbox has no
    screen for.  The same here, for the requests that ask for E2B's formats
    (_asked), patched when the code imports PIL."""
    def show_image(orig):
        def show_image(self, image, **options):  # UnixViewer: xdg-open, display, eog…
            if not _asked(shell):
                return orig(self, image, **options)
            from IPython.display import display
            display(image)
            return 1
        return show_image

    def save(orig):
        def save(self, fp, format=None, **params):
            if isinstance(fp, str) and _asked(shell):
                from IPython.display import display
                display(self)
            return orig(self, fp, format, **params)
        return save

    def image_show(module):
        viewer = module.UnixViewer
        viewer.show_image = show_image(viewer.show_image)

    def image(module):
        module.Image.save = save(module.Image.save)

    hooks = {"PIL.ImageShow": image_show, "PIL.Image": image}
    for name in [n for n in hooks if n in sys.modules]:  # already imported: now
        hooks.pop(name)(sys.modules[name])
    sys.meta_path.insert(0, _OnImport(hooks))


def _register_rich_formats():
    try:
        from ipykernel.ipkernel import IPythonKernel
    except Exception:
        return
    orig_init = IPythonKernel.__init__

    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        try:
            _rich_formats(self.shell)
        except Exception as e:
            print("sandgate-kernel: no e2b formats: %s" % e, file=sys.__stderr__)

    IPythonKernel.__init__ = __init__


module = "ipykernel_launcher"
if len(sys.argv) > 2 and sys.argv[1] == "-m" and sys.argv[2] == "bash_kernel":
    module = sys.argv[2]
    del sys.argv[1:3]
    _bash_interrupt()
else:
    _register_rich_formats()
_abstract_pipe()
_direct_iopub()
_ordered_fd_output()
_lazy_control_flush()
_direct_replies()
_cached_pid()
_log_level()
sys.argv[0] = module
runpy.run_module(module, run_name="__main__", alter_sys=True)
