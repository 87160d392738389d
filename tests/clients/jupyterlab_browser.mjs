// A person's use of JupyterLab 4, in headless Chromium, in steps named on
// the command line (python and r when none are):
//   python      open a Python notebook, type and run cells (a value, a
//               matplotlib figure, an exception, where the kernel runs);
//   r           open an R notebook (kernelspec ir) beside it, the same in R;
//   deno        open a JavaScript notebook (kernelspec deno, Deno's kernel)
//               in a tab over the R one (after r; beside the current
//               notebook without it): a value, an HTML table from
//               Deno.jupyter.html, where the kernel runs; then a screenshot
//               of it beside the Python notebook in SCREENSHOT-deno.png;
//   template=T  open a New Launcher (the tab bar's +), click the Notebook card
//               of the kernelspec of sandgate's template T (the one whose
//               spec.metadata.sandgate.template is T, display name "... (T)")
//               and run `pd.__version__` in it, with no import: the
//               caller's template preloads pandas as pd (after python or
//               snapshot: in the JupyterLab page they opened);
//   rich        open a Python notebook (in a tab after the Python one; by
//               its URL without python) and run cells whose outputs
//               carry sandgate's E2B types (e2b/chart, e2b/data) beside
//               image/png and text/plain: a bundle displayed raw without
//               and with them must render the same HTML, a matplotlib
//               figure exactly one <img>, a DataFrame exactly one HTML
//               table; every output renders (none without a renderer);
//   snapshot    open a Python notebook and run print(snapvar), which only a
//               kernel started from the caller's snapshot has defined;
//   attach=ID   POST /api/sessions on JupyterLab's server for agent.ipynb
//               with the running kernel ID (an agent's context), open a new
//               notebook and attach it to that kernel through the Select
//               Kernel dialog; df.head() of the agent's DataFrame
//               renders as a table, a cell adds df['total'], then a cell
//               prints nb 0..5 over 3 s while the caller's agent executes
//               too, and the page must show the kernel busy while the
//               agent's slow execution runs.  It talks with the caller on
//               stdin and stdout: "# column-added" (waits for "next"),
//               "# nb-running", "# nb-done" (waits for "slow-start", then
//               watches the kernel's status until "slow-done").
// Each step checks what the page renders.  JupyterLab runs its kernels
// wherever it is configured to (with --gateway-url: sandgate).
// JupyterLab must run with --LabApp.expose_app_in_browser=True (the script
// reads the kernels' ids and states from window.jupyterapp).
// usage: node jupyterlab_browser.mjs LAB_URL TOKEN SCREENSHOT.png [STEP...]
// Prints TAP, and "# kernel-STEP ID" for each step, "# where-python CWD
// RELEASE PID" (and the same for r and deno) for the caller; exits 0 only
// when every check passed.
import { chromium } from "playwright-core";
import { createInterface } from "node:readline";

const [labUrl, token, shot, ...argSteps] = process.argv.slice(2);
const steps = argSteps.length ? argSteps : ["python", "r"];
if (!shot || !steps.every((s) => /^(python|r|deno|rich|snapshot|template=.+|attach=.+)$/.test(s))) {
  console.error("usage: node jupyterlab_browser.mjs LAB_URL TOKEN SCREENSHOT.png " +
    "[python|r|deno|rich|template=NAME|snapshot|attach=KERNEL_ID ...]");
  process.exit(2);
}
const base = labUrl.replace(/\/+$/, "");
const LIMIT = Number(process.env.LAB_BROWSER_TIMEOUT || 180) * 1000;

let n = 0, failed = 0;
function ok(cond, name, detail) {
  n++;
  console.log(`${cond ? "ok" : "not ok"} ${n} - ${name}`);
  if (!cond) {
    failed++;
    if (detail !== undefined) console.log(`#   ${String(detail).split("\n").join("\n#   ")}`);
  }
  return cond;
}
let browser, page;
// On a time-out the screenshot shows where the page stood.
const timer = setTimeout(async () => {
  ok(false, `finished within ${LIMIT / 1000} s`);
  await page?.screenshot({ path: shot }).catch(() => {});
  console.log(`1..${n}`);
  process.exit(1);
}, LIMIT);

// A notebook with kernelspec `name`; with none, one that has no kernel yet.
const notebook = (name, language) => ({
  type: "notebook", format: "json",
  content: {
    cells: [], nbformat: 4, nbformat_minor: 5,
    metadata: name ? { kernelspec: { name, display_name: name, language } } : {},
  },
});

// Waits until the notebook panel `id` has a kernel in state idle, checks
// its kernelspec (name) and language, prints "# kernel-STEP ID"; returns
// {id, name, lang} of that kernel.
async function idleKernel(id, name, lang, what, step) {
  await page.waitForFunction((id) => {
    const w = window.jupyterapp.shell.widgets("main");
    for (const p of w) if (p.id === id) return p.sessionContext?.session?.kernel?.status === "idle";
    return false;
  }, id, { timeout: LIMIT, polling: 200 });
  const kernel = await page.evaluate(async (id) => {
    const p = [...window.jupyterapp.shell.widgets("main")].find((w) => w.id === id);
    const k = p.sessionContext.session.kernel;
    const info = await k.info;
    return { id: k.id, name: k.name, lang: info?.language_info?.name };
  }, id);
  ok(kernel.id && kernel.name === name && kernel.lang === lang,
    `${what} and its ${name} kernel becomes idle`, JSON.stringify(kernel));
  console.log(`# kernel-${step} ${kernel.id}`);
  return kernel;
}

// Types code into cell `index` of the panel and runs it with Shift+Enter;
// returns the cell's locator.
async function run(panel, page, index, code) {
  const cell = panel.locator(".jp-Notebook .jp-Cell").nth(index);
  await cell.locator(".cm-content").click();
  await page.keyboard.type(code);
  await page.keyboard.press("Shift+Enter");
  return cell;
}

async function png(cell) {
  const img = cell.locator(".jp-OutputArea-output img");
  await img.waitFor({ timeout: LIMIT });
  await img.evaluate((e) => e.complete || new Promise((r) => { e.onload = e.onerror = r; }));
  return img.evaluate((e) => ({ src: e.src, width: e.naturalWidth }));
}

async function text(cell, selector) {
  const out = cell.locator(selector);
  await out.first().waitFor({ timeout: LIMIT });
  return (await out.first().innerText()).trim();
}

const RESULT = ".jp-OutputArea-executeResult .jp-OutputArea-output";
const ANY = ".jp-OutputArea-output";
const STDOUT = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"]';
const ERROR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]';


let auth;

// Writes a notebook with kernelspec `name` (PUT /api/contents).
async function put(path, name, lang) {
  const r = await page.request.put(`${base}/api/contents/${path}`,
    { headers: auth, data: notebook(name, lang) });
  ok(r.status() === 201, `${path} with ${name ? `kernelspec ${name}` : "no kernelspec"} ` +
    "(PUT /api/contents)",
    `${r.status()} ${await r.text()}`);
}

// Opens the notebook by its URL, as a person would; returns its panel's id.
async function openByUrl(path) {
  await page.goto(`${base}/lab/tree/${path}?token=${token}`);
  await page.waitForFunction((path) => window.jupyterapp?.shell?.currentWidget?.context?.path ===
    path, path, { timeout: LIMIT, polling: 200 });
  return page.evaluate(() => {
    window.jupyterapp.shell.collapseLeft();
    return window.jupyterapp.shell.currentWidget.id;
  });
}

async function prompts(panel, count, what) {
  const got = await panel.locator(".jp-InputPrompt").allInnerTexts();
  const want = Array.from({ length: count }, (_, i) => `[${i + 1}]:`).join(" ");
  ok(got.slice(0, count).map((p) => p.replace(/\s/g, "")).join(" ") === want,
    `the ${what} prompts count the executions 1 to ${count}`, got.join(" | "));
}


// JSON of x with base64 and other long runs cut short, for a failure's detail.
const brief = (x) => (typeof x === "string" ? x : JSON.stringify(x))
  .replace(/[A-Za-z0-9+/=\\]{200,}/g, (b) => `${b.slice(0, 40)}…(${b.length} chars)`);

// Waits until cell `index` of panel `id` has run (its prompt shows [N]) and
// has an output in the notebook's model, rendered or not; when the page
// renders a PNG, until the image has loaded: returns png()'s {src, width}
// then, else {}.
async function ran(id, index) {
  const cell = page.locator(`[id="${id}"] .jp-Notebook .jp-Cell`).nth(index);
  await cell.locator(".jp-InputPrompt").filter({ hasText: /\[\d+\]/ }).waitFor({ timeout: LIMIT });
  await page.waitForFunction(([id, index]) => {
    const p = [...window.jupyterapp.shell.widgets("main")].find((w) => w.id === id);
    return p.content.model.cells.get(index).toJSON().outputs.length > 0;
  }, [id, index], { timeout: LIMIT, polling: 100 });
  return await cell.locator('.jp-OutputArea-output[data-mime-type="image/png"]').count()
    ? png(cell) : {};
}

// What cell `index` of panel `id` holds and shows: its outputs' types and
// MIME types in the notebook's model; the output area's children and how
// many of them a renderer rendered (JupyterLab 4 shows nothing for an
// output none of its renderers takes, where 3 wrote "No renderer could be
// found"); the preferred MIME types JupyterLab rendered; the outputs' HTML,
// element ids and prompts' texts left out (and the area's prompt overlay,
// which shows a collapse icon while the mouse is over it).
const shown = (id, index) => page.evaluate(([id, index]) => {
  const p = [...window.jupyterapp.shell.widgets("main")].find((w) => w.id === id);
  const outputs = p.content.model.cells.get(index).toJSON().outputs;
  const area = p.content.widgets[index].node.querySelector(".jp-OutputArea");
  const children = [...area.querySelectorAll(":scope > :not(.jp-OutputArea-promptOverlay)")];
  const html = children.map((e) => {
    const copy = e.cloneNode(true);
    copy.querySelectorAll("[id], [data-icon-id]").forEach((e) => {
      e.removeAttribute("id");
      e.removeAttribute("data-icon-id");
    });
    copy.querySelectorAll(".jp-OutputPrompt").forEach((e) => { e.textContent = ""; });
    return copy.outerHTML;
  });
  return {
    model: outputs.map((o) => `${o.output_type} ${Object.keys(o.data || {}).sort().join(" ")}`),
    data: outputs.map((o) => o.data),
    children: children.length,
    rendered: children.reduce((n, e) => n + e.querySelectorAll(".jp-OutputArea-output").length, 0),
    mimes: [...area.querySelectorAll(".jp-OutputArea-output")].map((e) => e.dataset.mimeType),
    html: html.join("\n"),
  };
}, [id, index]);

// The caller's lines on stdin, one at a time (the attach step's hand-shakes).
const lines = [], waiting = [];
let stdin;
async function expectLine(want) {
  stdin ||= createInterface({ input: process.stdin }).on("line", (l) => {
    const w = waiting.shift();
    if (w) w(l.trim()); else lines.push(l.trim());
  });
  const got = lines.length ? lines.shift() : await new Promise((r) => waiting.push(r));
  if (got !== want) throw new Error(`expected "${want}" from the caller, read "${got}"`);
}

// The rows of the HTML table a cell renders, each row's cells joined by spaces.
async function tableRows(cell) {
  const table = cell.locator('.jp-OutputArea-output[data-mime-type="text/html"] table');
  await table.waitFor({ timeout: LIMIT });
  const rows = await table.locator("tr").allInnerTexts();
  return rows.map((r) => r.trim().split(/\s+/).join(" ")).join(" | ");
}

// Attaches notebook panel `id` to the running kernel `kernelId` as a person
// would: the Select Kernel dialog (JupyterLab opens it with a notebook that
// has no kernel; else the toolbar's kernel name does), its option for that
// kernel.
async function attachKernel(id, kernelId) {
  const panel = page.locator(`[id="${id}"]`);
  const dialog = page.locator(".jp-Dialog");
  if (!await dialog.waitFor({ timeout: 60000 }).then(() => true, () => false))
    await panel.locator(".jp-Toolbar-kernelName").click();
  await dialog.locator("select").waitFor({ timeout: LIMIT });
  const options = await dialog.locator("select option").evaluateAll((os) =>
    os.map((o) => ({ value: o.value, text: o.textContent, group: o.parentElement.label })));
  const want = options.find((o) => o.value === JSON.stringify({ id: kernelId }));
  ok(want && want.text === `agent.ipynb (${kernelId.split("-")[0]})` &&
    want.group === "Connect to Existing Kernel",
    `the Select Kernel dialog lists the agent's kernel: "${want?.group}: ${want?.text}"`,
    options.map((o) => `${o.group}: ${o.text}`).join("\n"));
  await dialog.locator("select").selectOption(want?.value ?? "null");
  await dialog.locator(".jp-mod-accept").click();
  await dialog.waitFor({ state: "detached", timeout: LIMIT });
}

// The kernel status the page shows for panel `id`: the app's
// (sessionContext's kernel) and the notebook toolbar's execution indicator.
const pageStatus = (id) => page.evaluate((id) => {
  const p = [...window.jupyterapp.shell.widgets("main")].find((w) => w.id === id);
  const ind = p.node.querySelector(".jp-Notebook-ExecutionIndicator");
  return { app: p.sessionContext.session?.kernel?.status, toolbar: ind?.dataset.status };
}, id);

let pyId, rId;  // the Python and R notebooks' panels, in front for the screenshot

const STEPS = {
  async python() {
    await put("python.ipynb", "python3", "python");
    pyId = await openByUrl("python.ipynb");
    const py = page.locator(`[id="${pyId}"]`);
    await idleKernel(pyId, "python3", "python", "the Python notebook opens", "python");

    let c = await run(py, page, 0, "x = 6 * 7\nx");
    let t = await text(c, RESULT);
    ok(t === "42", "Python cell 1 (x = 6 * 7; x) renders 42", t);
    c = await run(py, page, 1, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]); plt.title('sandgate in JupyterLab'); plt.show()");
    const im = await png(c);
    ok(im.src.startsWith("data:image/png;base64,") && im.width > 100,
      `Python cell 2 renders the matplotlib figure as a PNG (${im.width} px wide)`, im.src.slice(0, 60));
    c = await run(py, page, 2, "1/0");
    t = await text(c, ERROR);
    ok(/ZeroDivisionError/.test(t) && /division by zero/.test(t),
      "Python cell 3 (1/0) renders the ZeroDivisionError traceback", t);
    c = await run(py, page, 3, "import os, platform\nprint(os.getcwd(), platform.release(), os.getpid())");
    t = await text(c, STDOUT);
    ok(/^\S+ \S+ \d+$/.test(t), `Python cell 4 reports where the kernel runs: ${t}`, t);
    console.log(`# where-python ${t}`);
    await prompts(py, 4, "Python");
  },

  async r() {
    await put("r.ipynb", "ir", "R");
    // Opened beside the current notebook.
    rId = await page.evaluate(async () => {
      const w = await window.jupyterapp.commands.execute("docmanager:open",
        { path: "r.ipynb", options: { mode: "split-right" } });
      return w.id;
    });
    const rp = page.locator(`[id="${rId}"]`);
    await idleKernel(rId, "ir", "R", "the R notebook opens beside it", "r");
    let c = await run(rp, page, 0, "x <- 6 * 7\nx");
    let t = await text(c, ANY);  // IRkernel shows a value as display_data
    ok(/^(\[1\] )?42$/.test(t), `R cell 1 (x <- 6 * 7; x) renders 42 (${t})`, t);
    c = await run(rp, page, 1, "plot(1:10, main = 'R in sandgate')");
    const im = await png(c);
    ok(im.src.startsWith("data:image/png;base64,") && im.width > 100,
      `R cell 2 renders the plot as a PNG (${im.width} px wide)`, im.src.slice(0, 60));
    c = await run(rp, page, 2, "f <- function() stop('boom')\nf()");
    t = await text(c, ERROR);
    ok(/boom/.test(t), "R cell 3 (stop('boom')) renders the error", t);
    c = await run(rp, page, 3, "cat(getwd(), Sys.info()['release'], Sys.getpid())");
    t = await text(c, STDOUT);
    ok(/^\S+ \S+ \d+$/.test(t), `R cell 4 reports where the kernel runs: ${t}`, t);
    console.log(`# where-r ${t}`);
    await prompts(rp, 4, "R");
  },

  async deno() {
    await put("deno.ipynb", "deno", "typescript");
    // In a tab over the R notebook (or beside the current one).
    const id = await page.evaluate(async (ref) => {
      const w = await window.jupyterapp.commands.execute("docmanager:open", {
        path: "deno.ipynb", options: ref ? { ref, mode: "tab-after" } : { mode: "split-right" },
      });
      return w.id;
    }, rId || null);
    const dp = page.locator(`[id="${id}"]`);
    await idleKernel(id, "deno", "typescript", "the JavaScript notebook opens", "deno");
    let c = await run(dp, page, 0, "const xs = [1, 2, 3];\nxs.map(x => x * 2)");
    let t = await text(c, RESULT);
    ok(t === "[ 2, 4, 6 ]", `JavaScript cell 1 (xs.map(x => x * 2)) renders [ 2, 4, 6 ]`, t);
    c = await run(dp, page, 1, "const row = (x) => `<tr><td>${x}</td><td>${x * 2}</td></tr>`;\n" +
      "Deno.jupyter.html`<table>\n<tr><th>x</th><th>x * 2</th></tr>\n${xs.map(row).join('')}\n</table>`");
    const table = c.locator('.jp-OutputArea-output[data-mime-type="text/html"] table');
    await table.waitFor({ timeout: LIMIT });
    const rows = await table.locator("tr").allInnerTexts();
    ok(rows.map((r) => r.trim().split(/\s+/).join(" ")).join(" | ") ===
      "x x * 2 | 1 2 | 2 4 | 3 6",
      "JavaScript cell 2 (Deno.jupyter.html) renders its HTML table", rows.join(" | "));
    // Deno.osRelease() reads /proc/sys/kernel/osrelease, which gVisor has not.
    c = await run(dp, page, 2, 'const release = Deno.readTextFileSync("/proc/version").split(" ")[2];\n' +
      "console.log(Deno.cwd(), release, Deno.pid)");
    t = await text(c, STDOUT);
    ok(/^\S+ \S+ \d+$/.test(t), `JavaScript cell 3 reports where the kernel runs: ${t}`, t);
    console.log(`# where-deno ${t}`);
    await prompts(dp, 3, "JavaScript");
    if (pyId)
      await page.evaluate((id) => window.jupyterapp.shell.activateById(id), pyId);
    await page.evaluate((id) => window.jupyterapp.shell.activateById(id), id);
    await page.mouse.click(1, 1);
    const denoShot = shot.replace(/(\.png)?$/, "-deno.png");
    await page.screenshot({ path: denoShot });
    console.log(`# screenshot-deno ${denoShot}`);
  },

  async template(name) {
    const spec = await page.evaluate(async (name) => {
      const ks = window.jupyterapp.serviceManager.kernelspecs;
      await ks.ready;
      return Object.values(ks.specs?.kernelspecs || {}).find(
        (s) => s?.metadata?.sandgate?.template === name) || null;
    }, name);
    ok(spec && spec.name === name && spec.display_name.endsWith(` (${name})`),
      `JupyterLab offers template ${name} as a kernelspec: ${spec?.display_name}`,
      JSON.stringify(spec));
    const before = await page.evaluate(() =>
      [...window.jupyterapp.shell.widgets("main")].map((w) => w.id));
    await page.locator("#jp-main-dock-panel .lm-TabBar-addButton").first().click();
    await page.locator(`.jp-LauncherCard[data-category="Notebook"]` +
      `[title=${JSON.stringify(spec.display_name)}]`).click({ timeout: LIMIT });
    const id = await page.waitForFunction((before) => {
      const w = window.jupyterapp.shell.currentWidget;
      return w?.context?.path?.endsWith(".ipynb") && !before.includes(w.id) && w.id;
    }, before, { timeout: LIMIT, polling: 200 }).then((h) => h.jsonValue());
    await idleKernel(id, name, "python",
      `the New Launcher's "${spec.display_name}" card opens a notebook`, "template");
    const c = await run(page.locator(`[id="${id}"]`), page, 0, "pd.__version__");
    const t = await text(c, ANY);
    const version = /^'\d+\.\d+\S*'$/.test(t);
    ok(version, `pd.__version__, with no import, renders pandas' version${version ? ` (${t})` : ""}` +
      ": the template preloaded it", t);
  },

  async attach(kernelId) {
    // Jupyter Server lists only the kernels it has started or has a session
    // on: a session of its own on the agent's kernel (the curl of
    // docs/jupyter.md) puts it in the dialog.
    const r = await page.request.post(`${base}/api/sessions`, { headers: auth, data: {
      path: "agent.ipynb", name: "agent.ipynb", type: "notebook", kernel: { id: kernelId } } });
    const session = await r.json().catch(() => ({}));
    ok(r.status() === 201 && session.kernel?.id === kernelId,
      "JupyterLab's server takes the agent's kernel into a session (POST /api/sessions " +
      "with its id)", `${r.status()} ${JSON.stringify(session)}`);
    await put("takeover.ipynb", null, null);
    const id = await openByUrl("takeover.ipynb");
    const nb = page.locator(`[id="${id}"]`);
    await attachKernel(id, kernelId);
    const k = await idleKernel(id, "python3", "python", "the notebook attaches", "attach");
    ok(k.id === kernelId, `its kernel is the running one, ${kernelId}`, k.id);

    let c = await run(nb, page, 0, "df.head()");
    let t = await tableRows(c);
    ok(t === "a b | 0 1 10 | 1 2 20 | 2 3 30 | 3 4 40",
      "df.head() renders the agent's DataFrame as an HTML table", t);
    c = await run(nb, page, 1, "df['total'] = df['a'] + df['b']\ndf");
    t = await tableRows(c);
    ok(t === "a b total | 0 1 10 11 | 1 2 20 22 | 2 3 30 33 | 3 4 40 44",
      "a cell adds the column total, and the table shows it", t);
    console.log("# column-added");
    await expectLine("next");

    c = await run(nb, page, 2, "import time\nfor i in range(6): print('nb', i, flush=True); time.sleep(0.5)");
    await c.locator(STDOUT).first().waitFor({ timeout: LIMIT });
    console.log("# nb-running");
    await page.waitForFunction((id) => {
      const p = [...window.jupyterapp.shell.widgets("main")].find((w) => w.id === id);
      const prompt = p.node.querySelectorAll(".jp-Notebook .jp-Cell")[2]
        ?.querySelector(".jp-InputPrompt")?.textContent || "";
      return /\[\d+\]/.test(prompt);
    }, id, { timeout: LIMIT, polling: 100 });
    console.log("# nb-done");
    const outs = (await c.locator(ANY).allInnerTexts()).join("\n").trim();
    ok(outs === [0, 1, 2, 3, 4, 5].map((i) => `nb ${i}`).join("\n"),
      "the notebook's cell shows its own output only: nb 0 to nb 5, no agent's line", outs);

    await expectLine("slow-start");
    const seen = { app: new Set(), toolbar: new Set() };
    let slowDone = false;
    const watched = expectLine("slow-done").then(() => { slowDone = true; });
    while (!slowDone) {
      const s = await pageStatus(id);
      seen.app.add(s.app);
      seen.toolbar.add(s.toolbar);
      await Promise.race([watched, new Promise((r) => setTimeout(r, 100))]);
    }
    ok(seen.app.has("busy") && seen.toolbar.has("busy"),
      "while the agent's slow execution runs, the page shows the kernel busy (the app's " +
      "kernel status and the toolbar's indicator)", JSON.stringify({ app: [...seen.app],
        toolbar: [...seen.toolbar] }));
    const idle = await page.waitForFunction((id) => {
      const p = [...window.jupyterapp.shell.widgets("main")].find((w) => w.id === id);
      const ind = p.node.querySelector(".jp-Notebook-ExecutionIndicator");
      return p.sessionContext.session?.kernel?.status === "idle" && ind?.dataset.status === "idle";
    }, id, { timeout: 15000, polling: 100 }).then(() => true, () => false);
    ok(idle, "and idle after it", JSON.stringify(await pageStatus(id)));
    await page.evaluate((id) => {  // the DataFrame's cells in view for the screenshot
      const p = [...window.jupyterapp.shell.widgets("main")].find((w) => w.id === id);
      p.content.activeCellIndex = 0;
      p.content.scrollToCell(p.content.widgets[0]);
    }, id);
  },

  async rich() {
    await put("rich.ipynb", "python3", "python");
    const id = pyId ? await page.evaluate(async (ref) => {
      const w = await window.jupyterapp.commands.execute("docmanager:open",
        { path: "rich.ipynb", options: { ref, mode: "tab-after" } });
      return w.id;
    }, pyId) : await openByUrl("rich.ipynb");
    const nb = page.locator(`[id="${id}"]`);
    await idleKernel(id, "python3", "python", "the notebook for E2B's types opens", "rich");

    // A real PNG, from a Figure that pyplot does not know (no display); its
    // length printed, an output to wait for.
    let c = await run(nb, page, 0, "import base64, io\nfrom matplotlib.figure import Figure\n" +
      "fig = Figure(figsize=(3, 2)); fig.add_subplot().plot([1, 3, 2]); buf = io.BytesIO(); " +
      "fig.savefig(buf, format='png')\n" +
      "b = {'text/plain': '<Figure>', 'image/png': base64.b64encode(buf.getvalue()).decode()}\n" +
      "print(len(b['image/png']))");
    await ran(id, 0);
    c = await run(nb, page, 1, "from IPython.display import display\ndisplay(b, raw=True)");
    const im = await ran(id, 1);
    c = await run(nb, page, 2, "chart = {'type': 'line', 'title': 'sandgate', 'x_label': 'x', " +
      "'y_label': 'y', 'x_unit': None, 'y_unit': None, " +
      "'elements': [{'label': 'a', 'points': [[0, 1], [1, 3], [2, 2]]}]}\n" +
      "display({**b, 'e2b/chart': chart, 'e2b/data': {'a': [1, 2]}}, raw=True)");
    await ran(id, 2);
    const [plain, e2b] = [await shown(id, 1), await shown(id, 2)];
    ok(plain.model.join() === "display_data image/png text/plain" &&
      e2b.model.join() === "display_data e2b/chart e2b/data image/png text/plain" &&
      e2b.data[0]["e2b/chart"]?.elements?.[0]?.points?.length === 3 &&
      JSON.stringify(e2b.data[0]["e2b/data"]) === '{"a":[1,2]}',
      "the page's notebook has the bundle without (cell 2) and with e2b/chart and e2b/data " +
      "(cell 3), as the kernel displayed them", brief([plain.model, e2b.model]));
    ok(im.src?.startsWith("data:image/png;base64,") && im.width > 100 &&
      plain.children === 1 && plain.rendered === 1 && plain.mimes.join() === "image/png",
      `cell 2 renders the bundle as one PNG (${im.width} px wide)`, brief(plain));
    ok(e2b.html === plain.html && e2b.children === 1 && e2b.rendered === 1,
      "cell 3, the same bundle with e2b/chart and e2b/data, renders exactly the same HTML",
      `without:\n${brief(plain.html)}\nwith:\n${brief(e2b.html)}`);

    c = await run(nb, page, 3, "import matplotlib.pyplot as plt\n" +
      "plt.plot([1, 3, 2]); plt.title('a chart for e2b/chart'); plt.show()");
    const fig = await ran(id, 3);
    let s = await shown(id, 3);
    console.log(`# rich-figure ${s.model.join(", ")}`);
    ok(fig.width > 100 && s.children === 1 && s.rendered === 1 && s.mimes.join() === "image/png" &&
      s.model.length === 1 && / image\/png /.test(s.model[0]),
      `the matplotlib cell renders exactly one output, the figure's PNG (${fig.width} px wide; ` +
      `${s.model[0]})`, brief(s));

    c = await run(nb, page, 4, "import pandas as pd\n" +
      "pd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']})");
    await ran(id, 4);
    s = await shown(id, 4);
    console.log(`# rich-frame ${s.model.join(", ")}`);
    const t = s.mimes.join() === "text/html" ? await tableRows(c) : "";
    const body = await c.locator(".jp-OutputArea-output table tbody tr").count();
    ok(t === "a b | 0 1 x | 1 2 y | 2 3 z" && body === 3 && s.children === 1 &&
      s.rendered === 1 && s.mimes.join() === "text/html",
      `the DataFrame cell renders exactly one output, its HTML table of 3 rows (${s.model[0]})`,
      `${t}\n${brief(s)}`);

    const errors = await nb.locator(ERROR).allInnerTexts();
    const bodyText = await page.locator("body").innerText();
    ok(errors.length === 0 && !/No renderer could be found/.test(bodyText),
      "no cell renders an error, and the page has no \"No renderer could be found\"",
      errors.join("\n"));
    await prompts(nb, 5, "E2B types'");
  },

  async snapshot() {
    await put("snapshot.ipynb", "python3", "python");
    const id = await openByUrl("snapshot.ipynb");
    await idleKernel(id, "python3", "python", "the Python notebook opens", "snapshot");
    const c = await run(page.locator(`[id="${id}"]`), page, 0, "print(snapvar)");
    const t = await text(c, ANY);
    ok(t === "from the snapshot",
      'print(snapvar) renders "from the snapshot": the kernel started from the snapshot', t);
  },
};

try {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  auth = { Authorization: `token ${token}` };

  for (const step of steps) {
    const [name, arg] = step.split("=");
    await STEPS[name](arg);
  }

  ok(errors.length === 0, "no errors in the page", errors.join("\n"));
  for (const id of [rId, pyId].filter(Boolean))
    await page.evaluate((id) => window.jupyterapp.shell.activateById(id), id);
  await page.mouse.click(1, 1);  // no cursor blinking in a cell
  await page.screenshot({ path: shot });
  ok(true, `screenshot written to ${shot}`);
} catch (e) {
  ok(false, "no exception", e.stack || String(e));
} finally {
  clearTimeout(timer);
  await browser?.close().catch(() => {});
  console.log(`1..${n}`);
  process.exit(failed ? 1 : 0);
}
