#!/usr/bin/env python3
"""Runs Argo CD's own test cases for each health check in deploy/argocd
(<group>/<Kind>/health_test.yaml: testdata/*.yaml -> expected status and
message), as Argo CD's resource_customizations test does, under a real Lua 5.1
(Argo CD's gopher-lua speaks 5.1). Also: the argocd-cm snippet is current.

argocd_cases.py                 run every case; exit 1 on any mismatch
argocd_cases.py health KIND F   print "<status>|<message>" of the object in F (JSON or YAML),
                                by deploy/argocd/<group>/KIND/health.lua
"""
import json
import pathlib
import subprocess
import sys
import tempfile

import yaml

root = pathlib.Path(__file__).resolve().parents[2]
argocd = root / "deploy" / "argocd"


def lua(v):
    if isinstance(v, dict):
        return "{" + ",".join(f"[{lua(k)}]={lua(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "{" + ",".join(lua(x) for x in v) + "}"
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "nil"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a JSON string is a valid Lua string literal here


def health(script, obj):
    """Argo CD runs the script as a chunk with the global `obj`."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as f:
        f.write("obj = " + lua(obj) + "\n")
        f.flush()
        prog = (f"dofile({json.dumps(f.name)}) local hs = assert(loadfile({json.dumps(str(script))}))() "
                "io.write(hs.status, '|', hs.message)")
        return subprocess.run(["lua5.1", "-e", prog], check=True, capture_output=True, text=True,
                              timeout=30).stdout


def main():
    if sys.argv[1:2] == ["health"]:
        kind, path = sys.argv[2], sys.argv[3]
        script, = argocd.glob(f"*/{kind}/health.lua")  # kubetrain.io's kinds, kubeflow.org's TFJob
        print(health(script, yaml.safe_load(open(path))))
        return 0
    failures = 0
    kinds = sorted(p.parent for p in argocd.glob("*/*/health.lua"))
    for d in kinds:
        cases = yaml.safe_load(open(d / "health_test.yaml"))["tests"]
        listed = {c["inputPath"] for c in cases}
        for data in sorted((d / "testdata").glob("*.yaml")):
            if f"testdata/{data.name}" not in listed:
                print(f"FAIL: {data} is in no case of {d / 'health_test.yaml'}")
                failures += 1
        for c in cases:
            want = c["healthStatus"]
            got = health(d / "health.lua", yaml.safe_load(open(d / c["inputPath"])))
            status, _, message = got.partition("|")
            name = f"{d.name}/{c['inputPath']}"
            if status != want["status"] or message != want.get("message", message):
                print(f"FAIL: {name}: got {status}|{message}, want {want['status']}|{want.get('message')}")
                failures += 1
            else:
                print(f"  ok: {name} is {status}")
    if subprocess.run([str(argocd / "make-argocd-cm"), "--check"]).returncode != 0:
        failures += 1
    print(f"{len(kinds)} health checks, {failures} failures")
    return 1 if failures else 0


sys.exit(main())
