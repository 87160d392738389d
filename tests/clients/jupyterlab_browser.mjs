// A person's use of JupyterLab 4, in headless Chromium: open a Python
// notebook, type and run cells (a value, a matplotlib figure, an exception,
// where the kernel runs), then open an R notebook (kernelspec ir) beside it
// and do the same in R; check what the page renders.  JupyterLab runs its
// kernels wherever it is configured to (with --gateway-url: sandgate).
// JupyterLab must run with --LabApp.expose_app_in_browser=True (the script
// reads the kernels' ids and states from window.jupyterapp).
// usage: node jupyterlab_browser.mjs LAB_URL TOKEN SCREENSHOT.png
// Prints TAP, and "# kernel-python ID", "# where-python CWD RELEASE PID" (and
// the same for r) for the caller; exits 0 only when every check passed.
import { chromium } from "playwright-core";

const [labUrl, token, shot] = process.argv.slice(2);
if (!shot) {
  console.error("usage: node jupyterlab_browser.mjs LAB_URL TOKEN SCREENSHOT.png");
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

const notebook = (name, language) => ({
  type: "notebook", format: "json",
  content: {
    cells: [], nbformat: 4, nbformat_minor: 5,
    metadata: { kernelspec: { name, display_name: name, language } },
  },
});

// Waits until the notebook panel `id` has a kernel in state idle; returns
// {id, name, lang} of that kernel.
async function idleKernel(page, id) {
  await page.waitForFunction((id) => {
    const w = window.jupyterapp.shell.widgets("main");
    for (const p of w) if (p.id === id) return p.sessionContext?.session?.kernel?.status === "idle";
    return false;
  }, id, { timeout: LIMIT, polling: 200 });
  return page.evaluate(async (id) => {
    const p = [...window.jupyterapp.shell.widgets("main")].find((w) => w.id === id);
    const k = p.sessionContext.session.kernel;
    const info = await k.info;
    return { id: k.id, name: k.name, lang: info?.language_info?.name };
  }, id);
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

try {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const auth = { Authorization: `token ${token}` };

  for (const [path, name, lang] of [["python.ipynb", "python3", "python"], ["r.ipynb", "ir", "R"]]) {
    const r = await page.request.put(`${base}/api/contents/${path}`,
      { headers: auth, data: notebook(name, lang) });
    ok(r.status() === 201, `${path} with kernelspec ${name} (PUT /api/contents)`,
      `${r.status()} ${await r.text()}`);
  }

  // The Python notebook, opened by its URL as a person would.
  await page.goto(`${base}/lab/tree/python.ipynb?token=${token}`);
  await page.waitForFunction(() => window.jupyterapp?.shell?.currentWidget?.context?.path ===
    "python.ipynb", null, { timeout: LIMIT, polling: 200 });
  const pyId = await page.evaluate(() => {
    window.jupyterapp.shell.collapseLeft();
    return window.jupyterapp.shell.currentWidget.id;
  });
  const py = page.locator(`[id="${pyId}"]`);
  let kernel = await idleKernel(page, pyId);
  ok(kernel.id && kernel.name === "python3" && kernel.lang === "python",
    "the Python notebook opens and its python3 kernel becomes idle", JSON.stringify(kernel));
  console.log(`# kernel-python ${kernel.id}`);

  let c = await run(py, page, 0, "x = 6 * 7\nx");
  let t = await text(c, RESULT);
  ok(t === "42", "Python cell 1 (x = 6 * 7; x) renders 42", t);
  c = await run(py, page, 1, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]); plt.title('sandgate in JupyterLab'); plt.show()");
  let im = await png(c);
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
  let prompts = await py.locator(".jp-InputPrompt").allInnerTexts();
  ok(prompts.slice(0, 4).map((p) => p.replace(/\s/g, "")).join(" ") === "[1]: [2]: [3]: [4]:",
    "the Python prompts count the executions 1 to 4", prompts.join(" | "));

  // The R notebook, opened beside it.
  const rId = await page.evaluate(async () => {
    const w = await window.jupyterapp.commands.execute("docmanager:open",
      { path: "r.ipynb", options: { mode: "split-right" } });
    return w.id;
  });
  const rp = page.locator(`[id="${rId}"]`);
  kernel = await idleKernel(page, rId);
  ok(kernel.id && kernel.name === "ir" && kernel.lang === "R",
    "the R notebook opens beside it and its ir kernel becomes idle", JSON.stringify(kernel));
  console.log(`# kernel-r ${kernel.id}`);
  c = await run(rp, page, 0, "x <- 6 * 7\nx");
  t = await text(c, ANY);  // IRkernel shows a value as display_data
  ok(/^(\[1\] )?42$/.test(t), `R cell 1 (x <- 6 * 7; x) renders 42 (${t})`, t);
  c = await run(rp, page, 1, "plot(1:10, main = 'R in sandgate')");
  im = await png(c);
  ok(im.src.startsWith("data:image/png;base64,") && im.width > 100,
    `R cell 2 renders the plot as a PNG (${im.width} px wide)`, im.src.slice(0, 60));
  c = await run(rp, page, 2, "f <- function() stop('boom')\nf()");
  t = await text(c, ERROR);
  ok(/boom/.test(t), "R cell 3 (stop('boom')) renders the error", t);
  c = await run(rp, page, 3, "cat(getwd(), Sys.info()['release'], Sys.getpid())");
  t = await text(c, STDOUT);
  ok(/^\S+ \S+ \d+$/.test(t), `R cell 4 reports where the kernel runs: ${t}`, t);
  console.log(`# where-r ${t}`);
  prompts = await rp.locator(".jp-InputPrompt").allInnerTexts();
  ok(prompts.slice(0, 4).map((p) => p.replace(/\s/g, "")).join(" ") === "[1]: [2]: [3]: [4]:",
    "the R prompts count the executions 1 to 4", prompts.join(" | "));

  ok(errors.length === 0, "no errors in the page", errors.join("\n"));
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
