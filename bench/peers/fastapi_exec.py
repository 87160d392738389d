"""The common tutorial design for an agent's code-execution tool: a FastAPI
service whose POST /execute starts a fresh Jupyter kernel for every request,
runs the code in it, collects what the kernel published, shuts the kernel
down and answers with JSON. Nothing is shared between requests, so every
round trip pays a kernel start by design; bench/peers.py measures it as a
peer of sandgate.

run: uvicorn fastapi_exec:app --app-dir bench/peers --port 8000
     (Debian: python3-fastapi python3-uvicorn python3-jupyter-client
     python3-ipykernel)
"""
from fastapi import FastAPI, HTTPException
from jupyter_client.manager import start_new_kernel
from pydantic import BaseModel

app = FastAPI(title="execute code in a fresh Jupyter kernel")


class ExecuteRequest(BaseModel):
    code: str
    timeout: float = 30.0


class ExecuteResponse(BaseModel):
    stdout: str = ""
    stderr: str = ""
    results: list = []  # the data bundles of execute_result and display_data
    error: dict | None = None


# A plain `def`: FastAPI runs it in its thread pool, so the blocking
# jupyter_client calls do not stop the event loop.
@app.post("/execute", response_model=ExecuteResponse)
def execute(req: ExecuteRequest):
    # Starts the python3 kernelspec and waits until it answers kernel_info.
    km, kc = start_new_kernel(kernel_name="python3")
    out = ExecuteResponse()

    def collect(msg):
        # Called for each iopub message of this execution, until idle.
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            if content["name"] == "stdout":
                out.stdout += content["text"]
            else:
                out.stderr += content["text"]
        elif kind in ("execute_result", "display_data"):
            out.results.append(content["data"])
        elif kind == "error":
            out.error = {"name": content["ename"], "value": content["evalue"],
                         "traceback": content["traceback"]}

    try:
        # Sends execute_request, feeds iopub to collect() until the kernel is
        # idle again, and returns the execute_reply.
        kc.execute_interactive(req.code, timeout=req.timeout, output_hook=collect)
    except TimeoutError:
        raise HTTPException(504, "execution timed out")
    finally:
        kc.stop_channels()
        # The kernel's state is thrown away anyway: kill it rather than wait
        # for a graceful shutdown before answering.
        km.shutdown_kernel(now=True)
    return out
