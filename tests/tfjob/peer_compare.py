#!/usr/bin/env python3
"""The peer comparison's data side (tests/tfjob/peer_compare.sh drives the cluster).

peer_compare.py adapt OUT_DIR FILE...
    Reads TFJob manifests, writes OUT_DIR/jobs.yaml (each job made to run on the
    test cluster's kwok nodes, the same for both operators) and OUT_DIR/plan.json
    (per job: its pods, and the exit code each pod gets when the job is ended).
    kwok adaptations, applied to both sides alike: metadata.namespace dropped,
    the kwok nodeSelector and toleration added, PersistentVolumeClaim volumes made
    emptyDir and nvidia.com/gpu requests dropped (kwok nodes have neither). Every
    job ends in success (success_exits: its evaluators, then its chief or master,
    else worker 0, or every worker under AllWorkers, exit 0); FAILURE_JOBS are
    also run a second time, as
    <name>-failure, where worker 1 (else worker 0) exits 1 instead, and
    SUSPENDED_JOBS as <name>-suspended with runPolicy.suspend true (no pods).

    OUT_DIR/managed-by.yaml: that job twice more, mb-kubetrain with
    runPolicy.managedBy kubetrain.io/operator and mb-v1 with v1's own value.

peer_compare.py compare WORK_DIR ALLOWED_MD
    Compares what training-operator v1.9.3 did in namespace cmp-v1 with what
    kubetrain did in cmp-kt (snapshots and watch streams in WORK_DIR, written by
    peer_compare.sh), field by field: the objects each job owns (Pods: names,
    labels, ownerReferences, restartPolicy, the tensorflow container's ports and
    env with TF_CONFIG parsed; Services: labels, selector, ports, clusterIP; any
    other kind), the sequence of status conditions (type, status, reason) each
    job went through, replicaStatuses and startTime/completionTime while running
    and at the end, which pods are left at the end, and the Argo CD health
    (deploy/argocd/kubeflow.org/TFJob/health.lua) of both statuses. Each
    difference has a key ("pod env CLUSTER_CONFIG"); ALLOWED_MD
    (docs/migrating-from-tfjob.md) lists the allowed keys, with their reasons, in
    the table after the heading "What the peer comparison allows" (a key may end
    in *). Prints every difference, marks the unlisted ones, and exits 1 if any
    is unlisted.
"""
import copy
import fnmatch
import json
import pathlib
import re
import subprocess
import sys

import yaml

NS = {"cmp-v1": "v1", "cmp-kt": "kubetrain"}
FAILURE_JOBS = ["dist-mnist-for-e2e-test"]
SUSPENDED_JOBS = ["fixture-ps-worker"]
ROLE_TYPES = ("chief", "master", "worker", "evaluator", "ps")
ROOT = pathlib.Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- adapt
def kwok_template(tmpl):
    spec = tmpl.setdefault("spec", {})
    spec["nodeSelector"] = {"type": "kwok"}
    spec["tolerations"] = [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
    for v in spec.get("volumes") or []:
        if "persistentVolumeClaim" in v:
            del v["persistentVolumeClaim"]
            v["emptyDir"] = {}
    for c in spec.get("containers") or []:
        for kind in ("limits", "requests"):
            (c.get("resources") or {}).get(kind, {}).pop("nvidia.com/gpu", None)


def replica_types(job):
    """{lower-case v1 type: replicas} of a TFJob."""
    out = {}
    for t, rs in (job["spec"].get("tfReplicaSpecs") or {}).items():
        out[t.lower()] = int(rs.get("replicas", 1))
    return out


def success_exits(name, types, success_policy):
    """The pods that end a job in success, in order: its evaluators (v1 ignores them,
    kubetrain waits for them), then the pods that decide success: the chief or
    master, else worker 0, or every worker under AllWorkers. The other workers
    (and the PS) never exit, so what each operator's cleanPodPolicy leaves is
    the same whatever the timing."""
    exits = [["%s-evaluator-%d" % (name, i), 0] for i in range(types.get("evaluator", 0))]
    for t in ("chief", "master"):
        if types.get(t):
            return exits + [["%s-%s-0" % (name, t), 0]]
    n = types.get("worker", 0) if success_policy == "AllWorkers" else min(1, types.get("worker", 0))
    return exits + [["%s-worker-%d" % (name, i), 0] for i in range(n)]


def adapt(out_dir, files):
    out = pathlib.Path(out_dir)
    docs, plan = [], {}
    for f in files:
        for job in yaml.safe_load_all(open(f)):
            if not job or job.get("kind") != "TFJob":
                continue
            job["metadata"].pop("namespace", None)
            for rs in job["spec"]["tfReplicaSpecs"].values():
                kwok_template(rs.setdefault("template", {}))
            runs = [(job, "success")]
            if job["metadata"]["name"] in FAILURE_JOBS:
                failing = copy.deepcopy(job)
                failing["metadata"]["name"] += "-failure"
                runs.append((failing, "failure"))
            if job["metadata"]["name"] in SUSPENDED_JOBS:
                held = copy.deepcopy(job)
                held["metadata"]["name"] += "-suspended"
                held["spec"].setdefault("runPolicy", {})["suspend"] = True
                runs.append((held, "suspended"))
            for j, scenario in runs:
                name = j["metadata"]["name"]
                types = replica_types(j)
                pods = ["%s-%s-%d" % (name, t, i) for t, n in types.items() for i in range(n)]
                if scenario == "suspended":
                    pods, exits = [], []
                elif scenario == "success":
                    exits = success_exits(name, types, j["spec"].get("successPolicy") or "")
                else:
                    victim = 1 if types.get("worker", 0) > 1 else 0
                    exits = [["%s-worker-%d" % (name, victim), 1]]
                plan[name] = {"file": str(f), "scenario": scenario, "pods": pods, "exits": exits}
                docs.append(j)
    with open(out / "jobs.yaml", "w") as fh:
        yaml.safe_dump_all(docs, fh, sort_keys=False)
    # Namespace cmp-mb, which both operators watch: the same job twice, one for
    # each operator by runPolicy.managedBy.
    base = next(d for d in docs if d["metadata"]["name"] == FAILURE_JOBS[0])
    mb = []
    for name, manager in (("mb-kubetrain", "kubetrain.io/operator"), ("mb-v1", "kubeflow.org/training-operator")):
        j = copy.deepcopy(base)
        j["metadata"]["name"] = name
        j["spec"].setdefault("runPolicy", {})["managedBy"] = manager
        mb.append(j)
    with open(out / "managed-by.yaml", "w") as fh:
        yaml.safe_dump_all(mb, fh, sort_keys=False)
    json.dump(plan, open(out / "plan.json", "w"), indent=1, sort_keys=True)
    print("%d jobs (%d pods) from %d files" % (len(plan), sum(len(p["pods"]) for p in plan.values()), len(files)))


# ---------------------------------------------------------------- compare
def normalise(v):
    """The two namespaces' names, which differ by design, replaced by NS everywhere."""
    if isinstance(v, dict):
        return {k: normalise(x) for k, x in v.items()}
    if isinstance(v, list):
        return [normalise(x) for x in v]
    if isinstance(v, str):
        for ns in NS:
            v = v.replace(ns, "NS")
    return v


def owned(items):
    """{(kind, name): object} of the objects a TFJob owns, with the owner's name."""
    out = {}
    for o in items:
        refs = [r for r in o["metadata"].get("ownerReferences") or [] if r.get("kind") == "TFJob"]
        if refs:
            out[(o["kind"], o["metadata"]["name"])] = (refs[0]["name"], normalise(o))
    return out


def tf_container(pod):
    cs = pod["spec"]["containers"]
    return next((c for c in cs if c["name"] == "tensorflow"), cs[0])


def env_of(c):
    out = {}
    for e in c.get("env") or []:
        if "value" in e:
            v = e["value"]
            if e["name"] == "TF_CONFIG":
                try:
                    v = json.loads(v)
                except ValueError:
                    pass
            out[e["name"]] = v
        else:  # valueFrom: compare where from, not the value
            out[e["name"]] = {"valueFrom": e.get("valueFrom")}
    return out


def role_of(name):
    m = re.search(r"-(%s)-\d+$" % "|".join(ROLE_TYPES), name)
    return m.group(1) if m else "?"


class Differences:
    def __init__(self):
        self.items = []  # (key, job, detail)
        self.compared = 0  # objects found on both sides

    def add(self, key, job, detail):
        self.items.append((key, job, detail))

    def cmp(self, key, job, a, b):
        if a != b:
            self.add(key, job, "v1 %s, kubetrain %s" % (json.dumps(a, sort_keys=True), json.dumps(b, sort_keys=True)))


def compare_objects(d, phase, v1, kt):
    d.compared += len(set(v1) & set(kt))
    for key in sorted(set(v1) | set(kt)):
        kind, name = key
        job = (v1.get(key) or kt.get(key))[0]
        if key not in kt:
            d.add("%s objects v1 only %s" % (kind.lower(), phase), job, name)
            continue
        if key not in v1:
            d.add("%s objects kubetrain only %s" % (kind.lower(), phase), job, name)
            continue
        a, b = v1[key][1], kt[key][1]
        k = kind.lower()
        la, lb = a["metadata"].get("labels") or {}, b["metadata"].get("labels") or {}
        for lk in sorted(set(la) | set(lb)):
            if la.get(lk) != lb.get(lk):
                d.add("%s label %s" % (k, lk), job, "%s: v1 %r, kubetrain %r" % (name, la.get(lk), lb.get(lk)))
        ra = [(r["kind"], r["name"], r.get("controller"), r.get("blockOwnerDeletion")) for r in a["metadata"]["ownerReferences"]]
        rb = [(r["kind"], r["name"], r.get("controller"), r.get("blockOwnerDeletion")) for r in b["metadata"]["ownerReferences"]]
        d.cmp("%s ownerReferences" % k, job, ra, rb)
        if kind == "Pod":
            d.cmp("pod restartPolicy", job, a["spec"].get("restartPolicy"), b["spec"].get("restartPolicy"))
            d.cmp("pod containers", job, [c["name"] for c in a["spec"]["containers"]],
                  [c["name"] for c in b["spec"]["containers"]])
            ca, cb = tf_container(a), tf_container(b)
            pa = {p.get("name"): p["containerPort"] for p in ca.get("ports") or []}
            pb = {p.get("name"): p["containerPort"] for p in cb.get("ports") or []}
            for pk in sorted(set(pa) | set(pb), key=str):
                if pk not in pb:
                    d.add("pod port %s v1 only" % pk, job, "%s: %s" % (name, pa[pk]))
                elif pk not in pa:
                    d.add("pod port %s kubetrain only" % pk, job, "%s: %s" % (name, pb[pk]))
                elif pa[pk] != pb[pk]:
                    d.add("pod port %s" % pk, job, "%s: v1 %s, kubetrain %s" % (name, pa[pk], pb[pk]))
            ea, eb = env_of(ca), env_of(cb)
            for ek in sorted(set(ea) | set(eb)):
                if ek not in eb:
                    d.add("pod env %s v1 only" % ek, job, name)
                elif ek not in ea:
                    d.add("pod env %s kubetrain only" % ek, job, name)
                elif ea[ek] != eb[ek]:
                    d.add("pod env %s" % ek, job, "%s: v1 %s, kubetrain %s" % (name, json.dumps(ea[ek], sort_keys=True),
                                                                                 json.dumps(eb[ek], sort_keys=True)))
        elif kind == "Service":
            d.cmp("service selector", job, a["spec"].get("selector"), b["spec"].get("selector"))
            d.cmp("service clusterIP", job, a["spec"].get("clusterIP"), b["spec"].get("clusterIP"))
            d.cmp("service ports", job, sorted((p.get("name"), p["port"], p.get("targetPort")) for p in a["spec"]["ports"]),
                  sorted((p.get("name"), p["port"], p.get("targetPort")) for p in b["spec"]["ports"]))


def watch_events(path):
    """The objects of a `kubectl get -w -o json --output-watch-events` stream."""
    text = open(path).read()
    dec, i, out = json.JSONDecoder(), 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        ev, i = dec.raw_decode(text, i)
        out.append(ev)


def condition_sequences(path):
    """{job: [conditions state, ...]}: each state the (type, status, reason) of every
    condition in order, consecutive repeats dropped."""
    seqs = {}
    for ev in watch_events(path):
        o = ev.get("object") or {}
        if ev.get("type") == "DELETED" or o.get("kind") != "TFJob":
            continue
        state = tuple("%s=%s(%s)" % (c["type"], c["status"], c.get("reason", ""))
                      for c in (o.get("status") or {}).get("conditions") or [])
        s = seqs.setdefault(o["metadata"]["name"], [])
        if state and (not s or s[-1] != state):
            s.append(state)
    return seqs


def argocd_health(obj):
    out = subprocess.run([str(ROOT / "tests" / "deploy" / "argocd_cases.py"), "health", "TFJob", "/dev/stdin"],
                         input=json.dumps(obj), capture_output=True, text=True, check=True).stdout.strip()
    return out.split("|", 1)[0]


def compare_status(d, phase, plan, v1_jobs, kt_jobs):
    for name in sorted(plan):
        a = (v1_jobs.get(name) or {}).get("status") or {}
        b = (kt_jobs.get(name) or {}).get("status") or {}
        if name not in kt_jobs or name not in v1_jobs:
            d.add("job missing %s" % phase, name, "v1 %s, kubetrain %s" % (name in v1_jobs, name in kt_jobs))
            continue
        ra, rb = a.get("replicaStatuses") or {}, b.get("replicaStatuses") or {}
        for t in sorted(set(ra) | set(rb)):
            x, y = ra.get(t) or {}, rb.get(t) or {}
            for f in sorted(set(x) | set(y)):
                if x.get(f) != y.get(f):
                    d.add("status replicaStatuses %s.%s %s %s" % (t, f, phase, plan[name]["scenario"]), name,
                          "v1 %s, kubetrain %s" % (json.dumps(x.get(f)), json.dumps(y.get(f))))
        for f in ("startTime", "completionTime"):
            d.cmp("status %s set %s %s" % (f, phase, plan[name]["scenario"]), name, f in a, f in b)
        d.cmp("argocd health %s %s" % (phase, plan[name]["scenario"]), name,
              argocd_health(v1_jobs[name]), argocd_health(kt_jobs[name]))


def allowed_keys(md):
    text = open(md).read()
    m = re.search(r"^#+ What the peer comparison allows\s*$(.*?)(?=^#+ |\Z)", text, re.M | re.S)
    if not m:
        sys.exit("%s has no section 'What the peer comparison allows'" % md)
    keys = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`") and cells[0].endswith("`"):
            keys[cells[0].strip("`")] = cells[1]
    return keys


def load(work, name):
    return json.load(open(work / name))["items"]


def compare(work_dir, md):
    work = pathlib.Path(work_dir)
    plan = json.load(open(work / "plan.json"))
    d = Differences()
    for phase in ("running", "final"):
        compare_objects(d, phase, owned(load(work, "%s-cmp-v1.json" % phase)), owned(load(work, "%s-cmp-kt.json" % phase)))
        jobs = {ns: {j["metadata"]["name"]: normalise(j) for j in load(work, "tfjobs-%s-%s.json" % (phase, ns))}
                for ns in NS}
        compare_status(d, phase, plan, jobs["cmp-v1"], jobs["cmp-kt"])
        if phase == "final":  # what is left: per job and role, the pods and their phases
            for name in sorted(plan):
                left = {}
                for ns in NS:
                    pods = [p for p in load(work, "final-%s.json" % ns) if p["kind"] == "Pod"
                            and p["metadata"]["name"].startswith(name + "-")
                            and p["metadata"]["name"] in plan[name]["pods"]]
                    left[ns] = {}
                    for p in pods:
                        left[ns].setdefault(role_of(p["metadata"]["name"]), []).append(p["status"].get("phase"))
                for role in sorted(set(left["cmp-v1"]) | set(left["cmp-kt"])):
                    a, b = sorted(left["cmp-v1"].get(role, [])), sorted(left["cmp-kt"].get(role, []))
                    if a != b:
                        d.add("pods left %s %s" % (role, plan[name]["scenario"]), name,
                              "v1 %s, kubetrain %s" % (a or "none", b or "none"))
    seqs = {ns: condition_sequences(work / ("watch-%s.json" % ns)) for ns in NS}
    for name in sorted(plan):
        a, b = seqs["cmp-v1"].get(name, []), seqs["cmp-kt"].get(name, [])
        # v1 writes Created alone when it sees the job, before any pod exists; a
        # first write that already holds more is its own (listed or not) key, and
        # the rest of the sequence is compared without it.
        if len(a) > 1 and len(a[0]) == 1 and b and b[0] != a[0] and b[0][:1] == a[0]:
            d.add("status conditions no Created-only write %s" % plan[name]["scenario"], name,
                  "kubetrain's first: [%s]" % ", ".join(b[0]))
            a = a[1:]
        if a != b:
            d.add("status conditions %s" % plan[name]["scenario"], name,
                  "\n      v1:        %s\n      kubetrain: %s" % (" -> ".join("[%s]" % ", ".join(s) for s in a),
                                                                   " -> ".join("[%s]" % ", ".join(s) for s in b)))
    allowed = allowed_keys(md)
    seen, unlisted = set(), 0
    for key, job, detail in d.items:
        match = next((k for k in allowed if fnmatch.fnmatchcase(key, k)), None)
        if match:
            seen.add(match)
        else:
            unlisted += 1
        print("%s %s [%s]: %s" % ("  listed" if match else "UNLISTED", key, job, detail))
    for k in sorted(set(allowed) - seen):
        print("note: listed but not seen in this run: %s" % k)
    keys = {k for k, _, _ in d.items}
    print("%d jobs, %d objects compared; %d differences of %d kinds, %d unlisted" % (len(plan), d.compared, len(d.items), len(keys), unlisted))
    return 1 if unlisted else 0


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "adapt":
        adapt(sys.argv[2], sys.argv[3:])
        return 0
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        return compare(sys.argv[2], sys.argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
