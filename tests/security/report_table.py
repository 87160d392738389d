"""Turns the JSON lines test_hostile.py writes (SG_SECURITY_REPORT=FILE) into
the Markdown table of docs/security.md.   usage: report_table.py FILE"""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| # | Area | Case | Attack | Outcome | Contained |")
print("| --- | --- | --- | --- | --- | --- |")
for i, r in enumerate(rows, 1):
    cell = lambda s: str(s).replace("|", "\\|").replace("\n", " ")
    print(f"| {i} | {r['area']} | {cell(r['case'])} | {cell(r['attack'])} | "
          f"{cell(r['outcome'])} | {'yes' if r['contained'] else '**NO**'} |")
print(f"\n{sum(r['contained'] for r in rows)} of {len(rows)} contained.")
