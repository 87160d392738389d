// @jupyterlab/services (npm), the library JupyterLab itself uses, against a
// Jupyter Server API: kernelspecs, kernels, execute with every kind of
// output, stdin, interrupt, restart, two connections on one kernel,
// completion, shutdown, sessions.
// usage: node jlab_services.mjs BASE_URL TOKEN default|v1
// Prints TAP; exits 0 only when every check passed.
import services from "@jupyterlab/services";
import WebSocket from "ws";

const { ServerConnection, KernelManager, KernelSpecAPI, KernelAPI, SessionManager, SessionAPI } =
  services;
const [baseUrl, token, mode] = process.argv.slice(2);
const V1 = "v1.kernel.websocket.jupyter.org";

// "default": a client that offers no subprotocol (as Notebook 6's frontend);
// "v1": the library's own choice, which offers v1.
class NoSubprotocolWebSocket extends WebSocket {
  constructor(url, _protocols, options) {
    super(url, [], options);
  }
}
const serverSettings = ServerConnection.makeSettings({
  baseUrl,
  wsUrl: "ws" + baseUrl.slice(4),
  token,
  appendToken: true,
  WebSocket: mode === "v1" ? WebSocket : NoSubprotocolWebSocket,
  fetch,
});

let n = 0, failed = 0;
function ok(cond, name, detail) {
  n++;
  console.log(`${cond ? "ok" : "not ok"} ${n} - ${name}`);
  if (!cond) {
    failed++;
    if (detail !== undefined)
      for (const l of String(typeof detail === "string" ? detail : JSON.stringify(detail)).split("\n"))
        console.log(`#   ${l}`);
  }
  return cond;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const timer = setTimeout(() => {
  ok(false, "finished within 240 s");
  console.log(`1..${n}`);
  process.exit(1);
}, 240000);

// Runs code; returns {reply, msgs} with every iopub message of the request.
async function run(kernel, code, opts = {}) {
  const future = kernel.requestExecute({ code, ...opts });
  const msgs = [];
  future.onIOPub = (m) => msgs.push(m);
  if (opts.onStdin) future.onStdin = (m) => opts.onStdin(m, future);
  const reply = await future.done;
  return { reply, msgs, msgId: future.msg.header.msg_id };
}
const types = (msgs) => msgs.map((m) => m.header.msg_type);
const streamText = (msgs) =>
  msgs.filter((m) => m.header.msg_type === "stream").map((m) => m.content.text).join("");

async function main() {
  const specs = await KernelSpecAPI.getSpecs(serverSettings);
  ok(specs.default === "python3" && specs.kernelspecs.python3?.language === "python" &&
    specs.kernelspecs.python3?.display_name,
    "KernelSpecAPI.getSpecs: python3 is the default, a python kernel", specs);

  const kernels = new KernelManager({ serverSettings });
  await kernels.ready;
  const kernel = await kernels.startNew({ name: "python3" });
  const info = await kernel.info;
  ok(info.language_info?.name === "python", "startNew + kernel.info: a Python kernel", info);
  ok(mode !== "v1" || kernel._selectedProtocol === V1,
    `WebSocket protocol negotiated: '${kernel._selectedProtocol}' (${mode})`);
  ok(mode !== "default" || kernel._selectedProtocol === "",
    "a client offering no subprotocol gets the default format");
  for (let i = 0; i < 100 && kernel.status !== "idle"; i++) await sleep(100);
  ok(kernel.status === "idle", "the kernel status reaches idle", kernel.status);

  let r = await run(kernel, 'print("hello")');
  ok(r.reply.content.status === "ok" && streamText(r.msgs) === "hello\n",
    "print -> an iopub stream 'hello'", types(r.msgs));
  ok(r.msgs.every((m) => m.parent_header.msg_id === r.msgId),
    "every iopub message names the request as its parent");
  await run(kernel, "x = 6*7");
  r = await run(kernel, "x");
  const res = r.msgs.find((m) => m.header.msg_type === "execute_result");
  ok(res?.content.data["text/plain"] === "42", "variables persist: execute_result 42", types(r.msgs));
  r = await run(kernel, 'from IPython.display import display, HTML\ndisplay(HTML("<b>hi</b>"))');
  const disp = r.msgs.find((m) => m.header.msg_type === "display_data");
  ok(disp?.content.data["text/html"] === "<b>hi</b>", "display_data with text/html", types(r.msgs));
  r = await run(kernel, "import matplotlib\nmatplotlib.use('module://matplotlib_inline.backend_inline')\n" +
    "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]); plt.show()");
  const png = r.msgs.find((m) => m.header.msg_type === "display_data" && m.content.data["image/png"]);
  ok(png && png.content.data["image/png"].length > 1000, "a matplotlib figure arrives as image/png",
    types(r.msgs));
  r = await run(kernel, "1/0");
  const err = r.msgs.find((m) => m.header.msg_type === "error");
  ok(r.reply.content.status === "error" && err?.content.ename === "ZeroDivisionError",
    "1/0 -> an error message and reply status error", r.reply.content);

  // stdin
  let prompt = null;
  r = await run(kernel, 'name = input("name? ")\nprint("hi", name)', {
    allow_stdin: true,
    onStdin: (m, future) => {
      prompt = m.content.prompt;
      future.sendInputReply({ value: "sandgate", status: "ok" }, m.header);
    },
  });
  ok(prompt === "name? ", "input() -> an input_request on stdin with its prompt", prompt);
  ok(streamText(r.msgs).includes("hi sandgate"), "the input_reply reaches input()", streamText(r.msgs));

  // interrupt
  const loop = kernel.requestExecute({ code: "import time\nwhile True: time.sleep(0.1)" });
  await sleep(1500);
  await kernel.interrupt();
  const lr = await loop.done;
  ok(lr.content.status === "error" && lr.content.ename === "KeyboardInterrupt",
    "interrupt stops a running loop (KeyboardInterrupt)", lr.content);

  // completion
  const comp = await kernel.requestComplete({ code: "import o", cursor_pos: 8 });
  ok(comp.content.matches?.includes("os"), "complete_request offers 'os'", comp.content.matches);

  // two connections on one kernel
  const other = kernels.connectTo({ model: { id: kernel.id, name: kernel.name } });
  await other.info;
  const seenByOther = [];
  other.iopubMessage.connect((_, m) => seenByOther.push(m));
  const [ra, rb] = await Promise.all([run(kernel, "'from a'"), run(other, "'from b'")]);
  ok(ra.reply.parent_header.msg_id === ra.msgId && rb.reply.parent_header.msg_id === rb.msgId,
    "two connections each get their own reply");
  ok(seenByOther.some((m) => m.parent_header.msg_id === ra.msgId),
    "iopub of one connection's request reaches the other (a broadcast)");
  other.dispose();

  // restart: same id, fresh variables
  await run(kernel, "y = 1");
  await kernel.restart();
  for (let i = 0; i < 100 && kernel.status !== "idle"; i++) await sleep(100);
  r = await run(kernel, "y");
  const nameErr = r.msgs.find((m) => m.header.msg_type === "error");
  ok(nameErr?.content.ename === "NameError", "after restart the variables are gone", types(r.msgs));
  const models = await KernelAPI.listRunning(serverSettings);
  ok(models.some((m) => m.id === kernel.id), "the kernel keeps its id across the restart");

  // shutdown
  const id = kernel.id;
  await kernel.shutdown();
  const after = await KernelAPI.listRunning(serverSettings);
  ok(!after.some((m) => m.id === id), "shutdown: the kernel is gone from listRunning");

  // sessions
  const sessions = new SessionManager({ serverSettings, kernelManager: kernels });
  await sessions.ready;
  const s = await sessions.startNew({ path: "test.ipynb", type: "notebook", name: "test.ipynb",
    kernel: { name: "python3" } });
  ok(s.kernel && s.path === "test.ipynb", "SessionManager.startNew: a session with a kernel", s.model);
  r = await run(s.kernel, "21 * 2");
  ok(r.msgs.find((m) => m.header.msg_type === "execute_result")?.content.data["text/plain"] === "42",
    "the session's kernel executes");
  const listed = await SessionAPI.listRunning(serverSettings);
  ok(listed.some((x) => x.id === s.id), "SessionAPI.listRunning shows it");
  await s.shutdown();
  const gone = await SessionAPI.listRunning(serverSettings);
  ok(!gone.some((x) => x.id === s.id), "session shutdown removes it");
  sessions.dispose();
  kernels.dispose();
}

main()
  .catch((e) => ok(false, "no exception", e.stack || String(e)))
  .finally(() => {
    clearTimeout(timer);
    console.log(`1..${n}`);
    process.exit(failed ? 1 : 0);
  });
