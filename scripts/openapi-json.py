#!/usr/bin/env python3
"""Turns docs/openapi.yaml into the C source of the JSON that sandgate serves
at GET /openapi.json (so the daemon never parses YAML):

    scripts/openapi-json.py docs/openapi.yaml openapi_json.c

The C file defines api_openapi_json (the compact JSON's bytes, NUL
appended) and api_openapi_json_len (without the NUL).  Needs PyYAML
(Debian: python3-yaml)."""
import json
import os
import sys

import yaml


def main(src, out):
    with open(src, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, dict) or not str(doc.get("openapi", "")).startswith("3.1"):
        sys.exit(f"{src}: not an OpenAPI 3.1 document")
    data = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    rows = [", ".join(str(b) for b in data[i:i + 24]) for i in range(0, len(data), 24)]
    with open(out + ".tmp", "w") as f:
        f.write(f"/* Generated from {os.path.basename(src)} by scripts/openapi-json.py: do not edit. */\n")
        f.write("#include <stddef.h>\n\n")
        f.write("extern const unsigned char api_openapi_json[];\n")
        f.write("extern const size_t api_openapi_json_len;\n\n")
        f.write("const unsigned char api_openapi_json[] = {\n")
        f.write(",\n".join(rows))
        f.write(", 0};\n")
        f.write(f"const size_t api_openapi_json_len = {len(data)};\n")
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: openapi-json.py SPEC.yaml OUT.c")
    main(sys.argv[1], sys.argv[2])
