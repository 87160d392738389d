"""Writes a seed corpus for fuzz_jmsg from the golden vectors (one file per
vector, in the harness's input format: flag byte, frames joined by 00 FF)."""
import base64
import json
import os
import sys

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
with open(src) as f:
    vectors = json.load(f)["vectors"]
for v in vectors:
    frames = [base64.b64decode(x) for x in v["frames"]]
    for flag in (0, 1):
        with open(os.path.join(out, f"{v['name']}-{flag}"), "wb") as f:
            f.write(bytes([flag]) + b"\x00\xff".join(frames))
