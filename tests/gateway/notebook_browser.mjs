// A person's use of Jupyter Notebook, in headless Chromium: open a new
// notebook, type two cells (a value, a matplotlib figure), run them, and check
// what the page renders.  Notebook runs its kernels wherever it is configured
// to (here: sandgate, through --gateway-url).
// usage: node notebook_browser.mjs NOTEBOOK_URL TOKEN SCREENSHOT.png
// Prints TAP; exits 0 only when every check passed.
import { chromium } from "playwright-core";

const [base, token, shot] = process.argv.slice(2);
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
const timer = setTimeout(() => {
  ok(false, "finished within 300 s");
  console.log(`1..${n}`);
  process.exit(1);
}, 300000);

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 1250 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const auth = { Authorization: `token ${token}` };
  const created = await page.request.post(`${base}/api/contents`, {
    headers: auth, data: { type: "notebook" } });
  const nb = await created.json();
  ok(created.status() === 201, `a new notebook ${nb.path}`, await created.text());

  await page.goto(`${base}/notebooks/${encodeURIComponent(nb.path)}?token=${token}`);
  await page.waitForSelector("#kernel_indicator_icon.kernel_idle_icon", { timeout: 180000 });
  ok(true, "the notebook opens and its kernel becomes idle");

  // Cell 1: a value.
  await page.click(".cell.code_cell .CodeMirror");
  await page.keyboard.type("x = 6 * 7\nx");
  await page.keyboard.press("Shift+Enter");
  const result = page.locator(".cell.code_cell").nth(0).locator(".output_result pre");
  await result.waitFor({ timeout: 120000 });
  const text = (await result.innerText()).trim();
  ok(text === "42", "cell 1 renders 42", text);

  // Cell 2: a figure.
  await page.keyboard.type(
    "%matplotlib inline\nimport matplotlib.pyplot as plt\n" +
    "plt.plot([1, 3, 2]); plt.title('sandgate')");
  await page.keyboard.press("Shift+Enter");
  const img = page.locator(".cell.code_cell").nth(1).locator(".output_png img");
  await img.waitFor({ timeout: 120000 });
  const { src, width } = await img.evaluate((e) => ({ src: e.src, width: e.naturalWidth }));
  ok(src.startsWith("data:image/png;base64,") && width > 100,
    `cell 2 renders the figure as a PNG (${width} px wide)`, src.slice(0, 60));

  // Cell 3: where it ran.
  await page.keyboard.type("import os, platform\nprint(os.getcwd(), platform.release())");
  await page.keyboard.press("Shift+Enter");
  const out = page.locator(".cell.code_cell").nth(2).locator(".output_stream pre");
  await out.waitFor({ timeout: 120000 });
  const where = (await out.innerText()).trim();
  ok(where.startsWith("/home/user"), `cell 3 runs in sandgate's workspace: ${where}`, where);

  const counts = await page.locator(".input_prompt").allInnerTexts();
  ok(counts.slice(0, 3).join(" ").includes("[3]"), "prompts count the executions", counts.join(" "));
  ok(errors.length === 0, "no errors in the page", errors.join("\n"));
  await page.evaluate(() => document.querySelector("#site")?.scrollTo(0, 0));
  await page.screenshot({ path: shot });
  ok(true, `screenshot written to ${shot}`);
} catch (e) {
  ok(false, "no exception", e.stack || String(e));
} finally {
  await browser.close();
  clearTimeout(timer);
  console.log(`1..${n}`);
  process.exit(failed ? 1 : 0);
}
