"""sandgate's LangChain tools (sandgate/langchain) and Deep Agents backend
(sandgate/deepagents) in real agent loops — LangChain's createAgent and
deepagents' createDeepAgent driven by @langchain/core's fake tool-calling
model, no LLM — against a real daemon (js_langchain.mjs), a figure's chart
data as the tool's text (bars; a pie and a box plot in one figure), the tools also on
a template's contexts (contextOptions { template }) and for JavaScript and
TypeScript contexts (executeCodeTool); then, against a daemon with
--notebook-url, the tool's artifact and text carry the context's link
(js_langchain_links.mjs)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jsenv import run_suite  # noqa: E402
from sgd import Daemon, TOKEN  # noqa: E402
from tap import ok, done  # noqa: E402

d = Daemon("--pool-size", "2", "--template", "pd=preload=import pandas as pd")
try:
    run_suite(d, "js_langchain.mjs", TOKEN, 39)
    status, contexts = d.json("GET", "/contexts")
    ok(status == 200 and len(contexts) == 0, "the tools' and the backend's close() removed their contexts",
       contexts)
finally:
    d.stop()
# A daemon with --notebook-url: the tools hand its link on.
NOTEBOOK_URL = "https://hub.example.org/user/alice/lab?kernel={kernel_id}"
d = Daemon("--pool-size", "1", "--notebook-url", NOTEBOOK_URL)
try:
    run_suite(d, "js_langchain_links.mjs", TOKEN, 3, NOTEBOOK_URL)
finally:
    d.stop()
done()
