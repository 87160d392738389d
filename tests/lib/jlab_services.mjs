// @jupyterlab/services (npm), the library JupyterLab itself uses, against a
// Jupyter Server API: kernelspecs, kernels, execute with every kind of
// output, stdin, interrupt, restart, two connections on one kernel,
// completion, shutdown, sessions.
//
// usage: node jlab_services.mjs BASE_URL TOKEN default|v1 [--server-without-v1]
//   default: the client offers no WebSocket subprotocol (as Notebook 6's
//            frontend), so the server must use the default JSON format;
//   v1:      the library's own choice: it offers v1.kernel.websocket.jupyter.org
//            and the server must select it;
//   --server-without-v1 (with v1): the server is known not to offer v1
//            (Notebook 6): the library's first socket must then fail and its
//            reconnection, offering nothing, get the default format.
// Prints TAP on stdout ("# protocol ..." and "# connect ..." say what was
// negotiated and what the library sent first); the library's own logging goes
// to stderr. Exits 0 only when every check passed.
import { format } from "node:util";
import services from "@jupyterlab/services";
import WebSocket from "ws";

const { ServerConnection, KernelManager, KernelSpecManager, KernelSpecAPI, KernelAPI,
  SessionManager, SessionAPI } = services;
const [baseUrl, token, mode, flag] = process.argv.slice(2);
const V1 = "v1.kernel.websocket.jupyter.org";
const withoutV1 = flag === "--server-without-v1";
if (!baseUrl || !["default", "v1"].includes(mode) || (flag && !withoutV1)) {
  process.stderr.write("usage: node jlab_services.mjs BASE_URL TOKEN default|v1 " +
    "[--server-without-v1]\n");
  process.exit(2);
}

// The library logs ("Starting WebSocket: ...") with console.*: keep stdout TAP.
for (const level of ["log", "debug", "info", "warn", "error"])
  console[level] = (...args) => process.stderr.write(format(...args) + "\n");
const say = (line) => process.stdout.write(line + "\n");

let n = 0, failed = 0;
function ok(cond, name, detail) {
  n++;
  say(`${cond ? "ok" : "not ok"} ${n} - ${name}`);
  if (!cond) {
    failed++;
    if (detail !== undefined) {
      const text = typeof detail === "string" ? detail : JSON.stringify(detail, null, 1);
      for (const l of String(text).split("\n").slice(0, 40)) say(`#   ${l}`);
    }
  }
  return cond;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const TIMEOUT = 240;  // s: two gVisor kernel starts and a restart on a busy machine
const timer = setTimeout(() => {
  ok(false, `finished within ${TIMEOUT} s`);
  say(`1..${n}`);
  process.exit(1);
}, TIMEOUT * 1000);

// Every WebSocket the library opens, with what it offered and what the server
// selected (the ws `protocol` property once open). In "default" mode nothing
// is offered.
const sockets = [];
class RecordingWebSocket extends WebSocket {
  constructor(url, protocols, options) {
    const offered = mode === "v1" ? [].concat(protocols ?? []) : [];
    super(url, offered, options);
    const rec = { url: String(url), offered, protocol: null, error: null, closed: null };
    sockets.push(rec);
    this.on("open", () => { rec.protocol = this.protocol; });
    this.on("error", (e) => { rec.error = e.message; });
    this.on("close", (code) => { rec.closed = code; });
  }
}
// REST requests, to report the authentication the library uses.
const requests = [];
const recordingFetch = (input, init) => {
  const req = input instanceof Request ? input : new Request(input, init);
  requests.push({ method: req.method, url: req.url, auth: req.headers.get("Authorization") });
  return fetch(input, init);
};

const serverSettings = ServerConnection.makeSettings({
  baseUrl,
  wsUrl: "ws" + baseUrl.slice(4),
  token,
  appendToken: true,
  WebSocket: RecordingWebSocket,
  fetch: recordingFetch,
});
const socketsOf = (kernel) =>
  sockets.filter((s) => s.url.includes(`session_id=${encodeURIComponent(kernel.clientId)}`));
const redact = (s) => s.replace(token, "<token>");

// What a connection sends and receives, by channel (the library's public
// anyMessage signal).
function traffic(kernel) {
  const log = [];
  kernel.anyMessage.connect((_, { msg, direction }) =>
    log.push({ direction, channel: msg.channel, type: msg.header.msg_type,
      id: msg.header.msg_id, parent: msg.parent_header?.msg_id }));
  return log;
}

// Runs code; returns {reply, msgs, msgId} with every iopub message of the request.
const requestParents = [];
async function run(kernel, code, opts = {}) {
  const { onStdin, onBusy, ...content } = opts;
  const future = kernel.requestExecute({ code, ...content });
  const msgId = future.msg.header.msg_id;
  const msgs = [];
  const stdin = [];
  future.onIOPub = (m) => {
    msgs.push(m);
    if (onBusy && m.header.msg_type === "status" && m.content.execution_state === "busy")
      onBusy();
  };
  future.onStdin = (m) => {
    stdin.push(m);
    if (onStdin) onStdin(m, future);
  };
  const reply = await future.done;
  requestParents.push({ msgId, parents: [reply, ...msgs, ...stdin].map((m) => m.parent_header.msg_id),
    replyChannel: reply.channel, replyType: reply.header.msg_type });
  return { reply, msgs, stdin, msgId };
}
const types = (msgs) => msgs.map((m) => m.header.msg_type);
const find = (msgs, type) => msgs.find((m) => m.header.msg_type === type);
const streamText = (msgs, name = "stdout") =>
  msgs.filter((m) => m.header.msg_type === "stream" && m.content.name === name)
    .map((m) => m.content.text).join("");
const textPlain = (r) => find(r.msgs, "execute_result")?.content.data["text/plain"];
async function untilIdle(kernel, what) {
  for (let i = 0; i < 300 && kernel.status !== "idle"; i++) await sleep(100);
  return ok(kernel.status === "idle", `${what}: the kernel status reaches idle`, kernel.status);
}

async function main() {
  // The server and its kernelspecs.
  const api = await ServerConnection.makeRequest(baseUrl.replace(/\/?$/, "/api"), {},
    serverSettings);
  const version = api.ok ? (await api.json()).version : null;
  ok(typeof version === "string", `GET /api answers with a version (${version})`, api.status);
  const specs = await KernelSpecAPI.getSpecs(serverSettings);
  const py = specs.kernelspecs?.python3;
  ok(specs.default === "python3" && py?.language === "python" && py?.display_name &&
    py?.argv, "KernelSpecAPI.getSpecs: python3 is the default, a python kernel", specs);
  const specManager = new KernelSpecManager({ serverSettings });
  await specManager.ready;
  ok(specManager.specs?.default === "python3" && specManager.specs.kernelspecs.python3
    ?.display_name === py?.display_name, "KernelSpecManager has the same specs",
  specManager.specs);
  specManager.dispose();

  // A kernel, its info, its WebSocket protocol.
  const kernels = new KernelManager({ serverSettings });
  await kernels.ready;
  const kernel = await kernels.startNew({ name: "python3" });
  const seen = traffic(kernel);
  const info = await kernel.info;
  ok(info.language_info?.name === "python" && info.protocol_version,
    `KernelManager.startNew + kernel.info: a Python kernel (${info.implementation} ` +
    `${info.implementation_version}, protocol ${info.protocol_version})`, info);
  await untilIdle(kernel, "after start");
  const mine = socketsOf(kernel);
  const last = mine[mine.length - 1];
  say(`# protocol ${mode}: offered ${JSON.stringify(mine.map((s) => s.offered))}, ` +
    `selected ${JSON.stringify(mine.map((s) => s.protocol ?? `failed: ${s.error}`))}`);
  say(`# connect: ${seen.slice(0, 4).map((m) => `${m.direction} ${m.channel} ${m.type}`)
    .join(", ")}`);
  if (mode === "default") {
    ok(mine.length === 1 && last.protocol === "",
      "a client offering no subprotocol gets the default format (protocol '')", mine);
  } else if (!withoutV1) {
    ok(mine.length === 1 && mine[0].offered.includes(V1) && last.protocol === V1,
      `the library offers ${V1} and the server selects it`, mine);
  } else {
    ok(mine.length === 2 && mine[0].offered.includes(V1) && /no subprotocol/.test(mine[0].error) &&
      mine[1].offered.length === 0 && mine[1].protocol === "",
    "the server ignores the v1 offer: ws refuses that socket and the library reconnects " +
    "offering nothing (default format)", mine);
  }
  ok(seen[0]?.direction === "send" && seen[0].channel === "shell" &&
    seen[0].type === "kernel_info_request" && seen.some((m) => m.direction === "recv" &&
      m.channel === "shell" && m.type === "kernel_info_reply" && m.parent === seen[0].id),
  "on connecting the library sends kernel_info_request on shell; its reply comes on shell",
  seen.slice(0, 6));
  say(`# auth: REST ${redact(String(requests[0]?.auth))}, WebSocket ` +
    `${redact(last.url.replace(/^.*\?/, "?"))}`);

  // Outputs.
  let r = await run(kernel, 'print("hello")');
  ok(r.reply.content.status === "ok" && streamText(r.msgs) === "hello\n",
    "print -> an iopub stream stdout 'hello\\n'", types(r.msgs));
  await run(kernel, "x = 6*7");
  r = await run(kernel, "x");
  ok(textPlain(r) === "42", "variables persist: x -> execute_result text/plain 42", types(r.msgs));
  r = await run(kernel, 'from IPython.display import display, HTML\ndisplay(HTML("<b>hi</b>"))');
  ok(find(r.msgs, "display_data")?.content.data["text/html"] === "<b>hi</b>",
    "display(HTML) -> display_data with text/html", types(r.msgs));
  r = await run(kernel, "import matplotlib\nmatplotlib.use('module://matplotlib_inline.backend_inline')\n" +
    "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]); plt.show()");
  const png = r.msgs.find((m) => m.header.msg_type === "display_data" && m.content.data["image/png"]);
  ok(png && png.content.data["image/png"].length > 1000, "a matplotlib figure -> display_data image/png",
    types(r.msgs));
  r = await run(kernel, "1/0");
  ok(r.reply.content.status === "error" && find(r.msgs, "error")?.content.ename === "ZeroDivisionError" &&
    r.reply.content.ename === "ZeroDivisionError",
  "1/0 -> an error message ZeroDivisionError and reply status error", r.reply.content);

  // stdin
  r = await run(kernel, 'name = input("name? ")\nprint("hi", name)', {
    allow_stdin: true,
    onStdin: (m, future) => future.sendInputReply({ value: "sandgate", status: "ok" }, m.header),
  });
  const req = r.stdin[0];
  ok(r.stdin.length === 1 && req.channel === "stdin" && req.header.msg_type === "input_request" &&
    req.content.prompt === "name? ", "input() -> an input_request on stdin with its prompt",
  r.stdin.map((m) => [m.channel, m.header.msg_type, m.content]));
  ok(r.reply.content.status === "ok" && streamText(r.msgs).includes("hi sandgate"),
    "the input_reply reaches input()", streamText(r.msgs));

  // interrupt (REST POST /api/kernels/{id}/interrupt)
  let busy;
  const running = new Promise((resolve) => { busy = resolve; });
  const loop = run(kernel, "import time\nwhile True: time.sleep(0.1)", { onBusy: () => busy() });
  await running;
  await sleep(1000);
  await kernel.interrupt();
  r = await loop;
  ok(r.reply.content.status === "error" && r.reply.content.ename === "KeyboardInterrupt" &&
    find(r.msgs, "error")?.content.ename === "KeyboardInterrupt",
  "interrupt stops a running loop (reply error KeyboardInterrupt)", r.reply.content);

  // restart: same id, fresh variables (the library opens a new WebSocket)
  await run(kernel, "y = 1");
  const idBefore = kernel.id;
  const socketsBefore = socketsOf(kernel).length;
  await kernel.restart();
  await untilIdle(kernel, "after restart");
  r = await run(kernel, "y");
  ok(find(r.msgs, "error")?.content.ename === "NameError" && r.reply.content.status === "error",
    "after restart y is gone (NameError: a fresh kernel)", types(r.msgs));
  const model = await KernelAPI.getKernelModel(idBefore, serverSettings);
  ok(kernel.id === idBefore && model?.id === idBefore, "the kernel keeps its id across the restart",
    { before: idBefore, after: kernel.id, model });
  say(`# restart: the library opened ${socketsOf(kernel).length - socketsBefore} new WebSocket(s)`);
  r = await run(kernel, "21 * 2");
  ok(textPlain(r) === "42", "the restarted kernel executes", types(r.msgs));

  // two connections on one kernel
  const other = kernels.connectTo({ model: { id: kernel.id, name: kernel.name } });
  const otherSeen = traffic(other);
  const otherInfo = await other.info;
  ok(otherInfo.language_info?.name === "python", "a second connection (connectTo) gets kernel.info");
  await untilIdle(other, "second connection");
  const [ra, rb] = await Promise.all([run(kernel, "'from a'"), run(other, "'from b'")]);
  ok(ra.reply.parent_header.msg_id === ra.msgId && rb.reply.parent_header.msg_id === rb.msgId &&
    textPlain(ra) === "'from a'" && textPlain(rb) === "'from b'",
  "two connections executing at once each get their own reply and result",
  [textPlain(ra), textPlain(rb)]);
  const iopubOf = (log, id) => log.filter((m) => m.direction === "recv" && m.channel === "iopub" &&
    m.parent === id);
  // The other connection's copy comes on its own socket, maybe after the
  // requester's future is done.
  const seesResult = (log, id) => iopubOf(log, id).some((m) => m.type === "execute_result");
  for (let i = 0; i < 100 && !(seesResult(otherSeen, ra.msgId) && seesResult(seen, rb.msgId)); i++)
    await sleep(100);
  ok(seesResult(otherSeen, ra.msgId) && seesResult(seen, rb.msgId),
  "iopub is broadcast: each connection sees the other's execute_result",
  { bSeesA: iopubOf(otherSeen, ra.msgId), aSeesB: iopubOf(seen, rb.msgId) });
  const shellOf = (log, id) => log.filter((m) => m.direction === "recv" && m.channel === "shell" &&
    m.parent === id);
  ok(shellOf(otherSeen, ra.msgId).length === 0 && shellOf(seen, rb.msgId).length === 0,
    "no cross-talk: neither connection receives the other's shell reply",
    { bGotA: shellOf(otherSeen, ra.msgId), aGotB: shellOf(seen, rb.msgId) });
  other.dispose();

  // completion
  const comp = await kernel.requestComplete({ code: "import o", cursor_pos: 8 });
  ok(comp.content.status === "ok" && comp.content.matches?.includes("os"),
    "complete_request 'import o' offers 'os'", comp.content);

  ok(requestParents.length > 10 && requestParents.every((p) => p.parents.every((id) => id === p.msgId) &&
    p.replyChannel === "shell" && p.replyType === "execute_reply"),
  `every reply, iopub and stdin message of the ${requestParents.length} executions names ` +
  "its request as parent (execute_reply on shell)",
  requestParents.filter((p) => p.parents.some((id) => id !== p.msgId)));

  // shutdown
  const id = kernel.id;
  await kernel.shutdown();
  ok(kernel.status === "dead", "kernel.shutdown: the connection's status is dead", kernel.status);
  const after = await KernelAPI.listRunning(serverSettings);
  ok(!after.some((m) => m.id === id), "shutdown: the kernel is gone from KernelAPI.listRunning", after);

  // sessions
  const sessions = new SessionManager({ serverSettings, kernelManager: kernels });
  await sessions.ready;
  const s = await sessions.startNew({ path: "test.ipynb", type: "notebook", name: "test.ipynb",
    kernel: { name: "python3" } });
  ok(s.kernel?.id && s.kernel.name === "python3" && s.path === "test.ipynb" && s.type === "notebook" &&
    s.name === "test.ipynb", "SessionManager.startNew: a notebook session with a python3 kernel",
  s.model);
  r = await run(s.kernel, "21 * 2");
  ok(textPlain(r) === "42", "the session's kernel executes", types(r.msgs));
  const listed = await SessionAPI.listRunning(serverSettings);
  const entry = listed.find((x) => x.id === s.id);
  ok(entry?.kernel?.id === s.kernel.id && entry.path === "test.ipynb",
    "SessionAPI.listRunning shows it with its kernel", listed);
  const sessionKernel = s.kernel.id;
  ok((await KernelAPI.listRunning(serverSettings)).some((k) => k.id === sessionKernel),
    "KernelAPI.listRunning shows the session's kernel");
  await s.shutdown();
  const gone = await SessionAPI.listRunning(serverSettings);
  ok(!gone.some((x) => x.id === s.id), "session shutdown removes it from SessionAPI.listRunning", gone);
  ok(!(await KernelAPI.listRunning(serverSettings)).some((k) => k.id === sessionKernel),
    "session shutdown also shuts its kernel down");
  sessions.dispose();
  kernels.dispose();
}

main()
  .catch((e) => ok(false, "no exception", e.stack || String(e)))
  .finally(() => {
    clearTimeout(timer);
    say(`1..${n}`);
    process.exit(failed ? 1 : 0);
  });
