// A person's use of Jupyter Notebook 6, in headless Chromium: create a new
// notebook, open it, wait for its kernel, type three cells (a value, a
// matplotlib figure, where the kernel runs), run them, and check what the
// page renders.  Notebook runs its kernels wherever it is configured to
// (through --gateway-url: sandgate, or another Notebook server as the
// reference gateway).
// usage: node notebook_browser.mjs NOTEBOOK_URL?token=TOKEN SCREENSHOT.png
//        node notebook_browser.mjs NOTEBOOK_URL TOKEN SCREENSHOT.png
// Prints TAP, and "# kernel ID" / "# where CWD RELEASE PID" for the caller;
// exits 0 only when every check passed.
import { chromium } from "playwright-core";

const args = process.argv.slice(2);
if (args.length < 2) {
  console.error("usage: node notebook_browser.mjs NOTEBOOK_URL?token=TOKEN SCREENSHOT.png");
  process.exit(2);
}
const shot = args[args.length - 1];
const url = new URL(args[0]);
const token = args.length > 2 ? args[1] : url.searchParams.get("token") || "";
url.search = "";
url.hash = "";
const base = url.href.replace(/\/+$/, "");
const LIMIT = Number(process.env.NB_BROWSER_TIMEOUT || 180) * 1000;

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
let browser;
const timer = setTimeout(async () => {
  ok(false, `finished within ${LIMIT / 1000} s`);
  console.log(`1..${n}`);
  process.exit(1);
}, LIMIT);

// Types a cell's code into the selected cell, runs it with Shift+Enter and
// returns the cell's locator (Notebook selects the next cell, adding one).
async function run(page, index, code) {
  const cell = page.locator(".cell.code_cell").nth(index);
  await cell.locator(".CodeMirror").click();
  await page.keyboard.type(code);
  await page.keyboard.press("Shift+Enter");
  return cell;
}

try {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  const page = await browser.newPage({ viewport: { width: 1100, height: 1250 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));

  // A new notebook through Notebook's contents API (what File > New does).
  const created = await page.request.post(`${base}/api/contents`, {
    headers: { Authorization: `token ${token}` }, data: { type: "notebook" } });
  const body = await created.text();
  const nb = created.status() === 201 ? JSON.parse(body) : {};
  if (!ok(created.status() === 201 && nb.type === "notebook",
    `a new notebook ${nb.path} (POST /api/contents)`, `${created.status()} ${body}`))
    throw new Error("no notebook to open");

  await page.goto(`${base}/notebooks/${encodeURIComponent(nb.path)}?token=${token}`);
  await page.waitForSelector("#kernel_indicator_icon.kernel_idle_icon", { timeout: LIMIT });
  const kernel = await page.evaluate(() => {
    const k = window.Jupyter?.notebook?.kernel;
    return k ? { id: k.id, name: k.name, lang: k.info_reply?.language_info?.name } : {};
  });
  ok(kernel.id && kernel.lang === "python",
    `the notebook opens and its ${kernel.name} kernel becomes idle`, JSON.stringify(kernel));
  console.log(`# kernel ${kernel.id}`);

  // Cell 1: a value.
  const c1 = await run(page, 0, "x = 6 * 7\nx");
  const result = c1.locator(".output_result pre");
  await result.waitFor({ timeout: LIMIT });
  const text = (await result.innerText()).trim();
  ok(text === "42", "cell 1 (x = 6 * 7; x) renders 42", text);

  // Cell 2: a matplotlib figure.
  const c2 = await run(page, 1,
    "%matplotlib inline\nimport matplotlib.pyplot as plt\n" +
    "plt.plot([1, 3, 2]); plt.title('sandgate')");
  const img = c2.locator(".output_png img");
  await img.waitFor({ timeout: LIMIT });
  await img.evaluate((e) => e.complete || new Promise((r) => { e.onload = e.onerror = r; }));
  const { src, width } = await img.evaluate((e) => ({ src: e.src, width: e.naturalWidth }));
  ok(src.startsWith("data:image/png;base64,") && width > 100,
    `cell 2 renders the matplotlib figure as a PNG (${width} px wide)`, src.slice(0, 60));

  // Cell 3: where the kernel runs (the caller checks it against the gateway).
  const c3 = await run(page, 2,
    "import os, platform\nprint(os.getcwd(), platform.release(), os.getpid())");
  const out = c3.locator(".output_stream pre");
  await out.waitFor({ timeout: LIMIT });
  const where = (await out.innerText()).trim();
  ok(/^\S+ \S+ \d+$/.test(where), `cell 3 reports where the kernel runs: ${where}`, where);
  console.log(`# where ${where}`);

  // A cell's output can come before its execute_reply renumbers its prompt
  // ("In [*]:"): wait for the third prompt to be counted.
  await page.waitForFunction(() => {
    const p = [...document.querySelectorAll(".input_prompt")].slice(0, 3);
    return p.length === 3 && p.every((e) => /\d/.test(e.innerText));
  }, null, { timeout: LIMIT }).catch(() => {});
  const prompts = await page.locator(".input_prompt").allInnerTexts();
  ok(prompts.slice(0, 3).map((p) => p.replace(/\s/g, "")).join(" ") === "In[1]: In[2]: In[3]:",
    "the prompts count the executions 1, 2, 3", prompts.join(" | "));
  ok(errors.length === 0, "no errors in the page", errors.join("\n"));
  await page.evaluate(() => document.querySelector("#site")?.scrollTo(0, 0));
  await page.screenshot({ path: shot, fullPage: true });
  ok(true, `screenshot written to ${shot}`);
} catch (e) {
  ok(false, "no exception", e.stack || String(e));
} finally {
  clearTimeout(timer);
  await browser?.close().catch(() => {});
  console.log(`1..${n}`);
  process.exit(failed ? 1 : 0);
}
