#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Offline checks of wsbridge's deployment files (no cluster, no Docker).

Usage: deploycheck.py [--root DIR] COMMAND [ARGS]

  render DIR [--engine E]   print what `kubectl kustomize DIR` gives
  compare DIR               kubectl kustomize and the fallback renderer agree
                            (exit 77 when there is no usable kubectl)
  validate DIR...           render each directory, then check every object
                            against its schema (unknown fields rejected) and
                            against wsbridge's own rules (policy_*)
  validate-files FILE...    the same for loose manifests ('-' = stdin), e.g.
                            claim.yaml or `claim.sh --print NAME`; policy
                            checks that need the rest use deploy/agent-sandbox
  kind-config [FILE]        the kind cluster config, its containerd patch and
                            runsc.toml (default deploy/kind/kind-config.yaml)
  versions                  image names, tags and pinned versions are the same
                            in images/image.env and everywhere they are used
  crds                      the vendored CRDs are unchanged (SOURCE.txt)
  dockerfiles               pinned bases, exec form, non-root, RUN scripts
                            (sh -n, shellcheck)
  all                       crds, versions, dockerfiles, kind-config, validate both
                            directories and deploy/agent-sandbox/claim.yaml

--root DIR: the source tree to check (default: this file's ../..). The
render engine is `kubectl kustomize` when kubectl's kustomize is v4 or newer,
else the fallback in this file (resources, namespace and images: the fields
wsbridge's kustomizations use, and an error for any other field); set
WSB_KUSTOMIZE_ENGINE=python or kubectl to choose.

Exit status: 0 all good; 1 a check failed (one line per problem:
"WHERE: WHAT"); 2 bad usage or the checker itself failed; 77 skipped.
Needs Debian's python3-yaml and python3-jsonschema (run with /usr/bin/python3).
"""

import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

try:
    import jsonschema
    import yaml
except ImportError as e:
    sys.exit(f"deploycheck: {e}: install the Debian 12 packages python3-yaml and "
             "python3-jsonschema, and run this with /usr/bin/python3")

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------- basics


class CheckError(Exception):
    """A fault in the checked files that stops a check early."""


class Problems:
    """Collects "WHERE: WHAT" lines; a check fails when any were added."""

    def __init__(self):
        self.lines = []

    def add(self, where, what):
        self.lines.append(f"{where}: {what}")

    def report(self, title):
        for line in self.lines:
            print(f"FAIL {line}", file=sys.stderr)
        if not self.lines:
            print(f"ok   {title}")
        return 1 if self.lines else 0


class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """Safe YAML loader that refuses duplicate mapping keys, which the
    Kubernetes API server's strict decoding refuses too."""


def _mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_yaml_docs(path, text=None):
    """All documents of a YAML file, empty ones dropped."""
    try:
        if text is None:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        return [d for d in yaml.load_all(text, Loader=StrictLoader) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        raise CheckError(f"{path}: {e}") from None


def load_yaml(path, trusted=False):
    """The one document of a YAML file. trusted: a vendored file, loaded with
    libyaml alone (the duplicate-key check costs seconds on the CRDs)."""
    if trusted:
        with open(path, encoding="utf-8") as f:
            return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    docs = load_yaml_docs(path)
    if len(docs) != 1:
        raise CheckError(f"{path}: want one YAML document, found {len(docs)}")
    return docs[0]


def load_env(path):
    """images/image.env: KEY=VALUE lines, the rules of images/lib.sh."""
    env = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise CheckError(f"{path}: {e}") from None
    for n, line in enumerate(lines, 1):
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Z][A-Z0-9_]*)=([^\s\"'$`]+)", line)
        if not m:
            raise CheckError(f"{path}:{n}: not a KEY=VALUE line: {line}")
        if m.group(1) in env:
            raise CheckError(f"{path}:{n}: {m.group(1)} defined twice")
        env[m.group(1)] = m.group(2)
    return env


def obj_name(o):
    if not isinstance(o, dict):
        return f"<{type(o).__name__}>"
    md = o.get("metadata") if isinstance(o.get("metadata"), dict) else {}
    ns = md.get("namespace")
    return f"{o.get('kind', '?')}/{(ns + '/') if ns else ''}{md.get('name', '?')}"


def rel(root, path):
    return os.path.relpath(path, root)


# ---------------------------------------------------------------- render

# Kinds kustomize knows to be cluster-scoped (its namespace transformer leaves
# them alone); any other kind, custom resources included, is namespaced.
CLUSTER_SCOPED = {
    "Namespace", "RuntimeClass", "ClusterRole", "ClusterRoleBinding",
    "CustomResourceDefinition", "PersistentVolume", "StorageClass",
    "PriorityClass", "IngressClass", "CSIDriver", "Node", "APIService",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
}

# kustomize's "legacy" output order (api/resid/gvk.go), for readable output.
ORDER_FIRST = [
    "Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition",
    "ServiceAccount", "PodSecurityPolicy", "Role", "ClusterRole", "RoleBinding",
    "ClusterRoleBinding", "ConfigMap", "Secret", "Endpoints", "Service",
    "LimitRange", "PriorityClass", "PersistentVolume", "PersistentVolumeClaim",
    "Deployment", "StatefulSet", "CronJob", "PodDisruptionBudget",
]
ORDER_LAST = ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]

KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
FALLBACK_FIELDS = {"apiVersion", "kind", "namespace", "resources", "images"}
IMAGE_FIELDS = {"name", "newName", "newTag", "digest"}


def split_image(ref):
    """'host:5000/a/b:tag@sha256:x' -> ('host:5000/a/b', 'tag', 'sha256:x')."""
    digest = None
    if "@" in ref:
        ref, digest = ref.split("@", 1)
    tag = None
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        ref, tag = ref[:colon], ref[colon + 1:]
    return ref, tag, digest


def retag(ref, image):
    name, tag, digest = split_image(ref)
    new = image.get("newName", name)
    if "digest" in image:
        return f"{new}@{image['digest']}"
    if "newTag" in image:
        return f"{new}:{image['newTag']}"
    return new + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


def apply_images(node, images):
    """kustomize's image transformer (its legacy filter): every `image` of an
    item of any `containers` or `initContainers` list, at any depth."""
    if isinstance(node, dict):
        for key, val in node.items():
            if key in ("containers", "initContainers") and isinstance(val, list):
                for c in val:
                    if isinstance(c, dict) and isinstance(c.get("image"), str):
                        for im in images:
                            if split_image(c["image"])[0] == im["name"]:
                                c["image"] = retag(c["image"], im)
                                break
            apply_images(val, images)
    elif isinstance(node, list):
        for val in node:
            apply_images(val, images)


def find_kustomization(d):
    for n in KUSTOMIZATION_NAMES:
        p = os.path.join(d, n)
        if os.path.isfile(p):
            return p
    raise CheckError(f"{d}: no kustomization.yaml")


def render_python(d):
    """The fallback renderer: the kustomization fields listed in
    FALLBACK_FIELDS, with kustomize's semantics; anything else is an error
    rather than being ignored."""
    d = os.path.abspath(d)
    kpath = find_kustomization(d)
    k = load_yaml(kpath) or {}
    if not isinstance(k, dict):
        raise CheckError(f"{kpath}: not a mapping")
    extra = sorted(set(k) - FALLBACK_FIELDS)
    if extra:
        raise CheckError(f"{kpath}: the fallback renderer implements only "
                         f"{', '.join(sorted(FALLBACK_FIELDS))}; found {', '.join(extra)} "
                         "(render with kubectl >= 1.21 instead)")
    if k.get("apiVersion", "kustomize.config.k8s.io/v1beta1") != "kustomize.config.k8s.io/v1beta1":
        raise CheckError(f"{kpath}: apiVersion {k['apiVersion']!r} is not kustomize.config.k8s.io/v1beta1")
    if k.get("kind", "Kustomization") != "Kustomization":
        raise CheckError(f"{kpath}: kind {k['kind']!r} is not Kustomization")
    objs = []
    for r in k.get("resources") or []:
        if not isinstance(r, str) or re.match(r"^[a-z]+://", r):
            raise CheckError(f"{kpath}: resource {r!r}: only local files and directories")
        p = os.path.normpath(os.path.join(d, r))
        if os.path.isdir(p):
            objs += render_python(p)
            continue
        # kustomize's load restrictor: files from inside the kustomization root
        if os.path.commonpath([p, d]) != d:
            raise CheckError(f"{kpath}: resource {r!r} is outside {d} "
                             "(kustomize's LoadRestrictionsRootOnly)")
        if not os.path.isfile(p):
            raise CheckError(f"{kpath}: resource {r!r}: no such file")
        for o in load_yaml_docs(p):
            if not isinstance(o, dict) or "kind" not in o or "apiVersion" not in o:
                raise CheckError(f"{p}: a document without apiVersion and kind")
            objs.append(o)
    images = k.get("images") or []
    for im in images:
        if not isinstance(im, dict) or "name" not in im or set(im) - IMAGE_FIELDS:
            raise CheckError(f"{kpath}: images entry {im!r}: want name and newName/newTag/digest")
    apply_images(objs, images)
    ns = k.get("namespace")
    if ns:
        sa_ns = {(o.get("metadata") or {}).get("name"): (o.get("metadata") or {}).get("namespace")
                 for o in objs if o["kind"] == "ServiceAccount"}
        for o in objs:
            if o["kind"] in ("RoleBinding", "ClusterRoleBinding"):
                for s in o.get("subjects") or []:
                    if (s.get("kind") == "ServiceAccount" and s.get("name") in sa_ns
                            and s.get("namespace") in (None, sa_ns[s["name"]])):
                        s["namespace"] = ns
            if o["kind"] not in CLUSTER_SCOPED:
                o.setdefault("metadata", {})["namespace"] = ns
            elif o["kind"] == "Namespace":
                # kustomize (v5) names a Namespace object after `namespace:`
                o.setdefault("metadata", {})["name"] = ns
    return objs


def kubectl_kustomize_usable():
    """True when `kubectl kustomize` is kustomize v4 or newer (kubectl
    >= 1.21). Debian 12's kubernetes-client (1.20, kustomize v2.0.3) is not:
    it puts a namespace on RuntimeClass, which is cluster-scoped."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return False
    try:
        out = subprocess.run([kubectl, "version", "--client", "-o", "json"],
                             capture_output=True, text=True, timeout=20).stdout
        v = json.loads(out).get("kustomizeVersion", "")
    except (OSError, ValueError, subprocess.SubprocessError):
        return False
    m = re.match(r"v(\d+)\.", v)
    return bool(m) and int(m.group(1)) >= 4


def render_kubectl(d):
    p = subprocess.run(["kubectl", "kustomize", d], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise CheckError(f"{d}: kubectl kustomize failed: {p.stderr.strip()}")
    return load_yaml_docs(f"kubectl kustomize {d}", p.stdout)


def render(d, engine=None):
    engine = engine or os.environ.get("WSB_KUSTOMIZE_ENGINE", "auto")
    if engine == "auto":
        engine = "kubectl" if kubectl_kustomize_usable() else "python"
    if engine == "kubectl":
        return render_kubectl(d), "kubectl kustomize"
    if engine == "python":
        return render_python(d), "fallback renderer"
    raise CheckError(f"unknown engine {engine!r} (auto, kubectl, python)")


def sort_key(o):
    kind = o.get("kind", "")
    if kind in ORDER_FIRST:
        rank = ORDER_FIRST.index(kind)
    elif kind in ORDER_LAST:
        rank = len(ORDER_FIRST) + 1 + ORDER_LAST.index(kind)
    else:
        rank = len(ORDER_FIRST)
    md = o.get("metadata") or {}
    return (rank, o.get("apiVersion", ""), kind, md.get("namespace") or "", md.get("name") or "")


# ---------------------------------------------------------------- schemas


def strictify(s):
    """Reject unknown fields wherever the CRD lists properties and does not
    say x-kubernetes-preserve-unknown-fields; bound int32/int64 formats."""
    if not isinstance(s, dict):
        return s
    if "properties" in s and "additionalProperties" not in s \
            and not s.get("x-kubernetes-preserve-unknown-fields"):
        s["additionalProperties"] = False
    if s.get("type") == "integer" and s.get("format") == "int32":
        s.setdefault("minimum", -2**31)
        s.setdefault("maximum", 2**31 - 1)
    if s.get("x-kubernetes-int-or-string") and "anyOf" not in s:
        s["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    for key in ("properties", "patternProperties"):
        for child in (s.get(key) or {}).values():
            strictify(child)
    for key in ("items", "additionalProperties", "not"):
        if isinstance(s.get(key), dict):
            strictify(s[key])
    for key in ("anyOf", "allOf", "oneOf"):
        for child in s.get(key) or []:
            strictify(child)
    return s


def json_pointer(doc, pointer):
    for part in pointer.strip("/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


class Schemas:
    """Validators by "apiVersion/kind": the vendored Agent Sandbox CRDs (every
    served version) and tests/deploy/schemas/core.yaml."""

    def __init__(self, root):
        self.dir = os.path.join(root, "tests", "deploy", "schemas")
        self.crds = {}        # file name -> {version: openAPIV3Schema}
        self.docs = {}        # "apiVersion/kind" -> schema document
        self.deprecated = set()
        self.validators = {}
        crd_dir = os.path.join(self.dir, "agent-sandbox")
        for f in sorted(os.listdir(crd_dir)):
            if not f.endswith(".yaml"):
                continue
            crd = load_yaml(os.path.join(crd_dir, f), trusted=True)
            if crd.get("kind") != "CustomResourceDefinition":
                raise CheckError(f"{crd_dir}/{f}: not a CustomResourceDefinition")
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            self.crds[f] = {}
            for v in crd["spec"]["versions"]:
                s = v["schema"]["openAPIV3Schema"]
                self.crds[f][v["name"]] = s
                if not v.get("served", False):
                    continue
                key = f"{group}/{v['name']}/{kind}"
                doc = strictify(copy.deepcopy(s))
                doc.setdefault("properties", {})["metadata"] = {"$ref": "#/definitions/objectMeta"}
                doc["required"] = sorted(set(doc.get("required", [])) | {"apiVersion", "kind", "metadata"})
                self.docs[key] = doc
                if v.get("deprecated"):
                    self.deprecated.add(key)
        core = load_yaml(os.path.join(self.dir, "core.yaml"))
        # The hand-written part must itself be a valid draft 7 schema ($crd is
        # an extension keyword, ignored here); the CRD parts are generated.
        jsonschema.Draft7Validator.check_schema(core)
        self.definitions = {k: self.resolve(v) for k, v in core["definitions"].items()}
        for key, doc in core["kinds"].items():
            self.docs[key] = self.resolve(doc)

    def resolve(self, node):
        """Replace {$crd: FILE#VERSION/POINTER} by that CRD sub-schema."""
        if isinstance(node, dict):
            if "$crd" in node:
                ref = node["$crd"]
                f, _, rest = ref.partition("#")
                version, _, pointer = rest.partition("/")
                try:
                    sub = json_pointer(self.crds[f][version], pointer)
                except (KeyError, IndexError, ValueError):
                    raise CheckError(f"core.yaml: {ref}: no such CRD sub-schema") from None
                return strictify(copy.deepcopy(sub))
            return {k: self.resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [self.resolve(v) for v in node]
        return node

    def validator(self, key):
        if key not in self.validators:
            doc = dict(self.docs[key])
            doc["$schema"] = "http://json-schema.org/draft-07/schema#"
            doc["definitions"] = self.definitions
            self.validators[key] = jsonschema.Draft7Validator(doc)
        return self.validators[key]

    def validate(self, o, where, problems):
        if not isinstance(o, dict) or not isinstance(o.get("apiVersion"), str) \
                or not isinstance(o.get("kind"), str):
            problems.add(where, "not a Kubernetes object (apiVersion and kind)")
            return
        key = f"{o['apiVersion']}/{o['kind']}"
        if key not in self.docs:
            problems.add(where, f"no schema for {o['apiVersion']} {o['kind']}: add one to "
                         "tests/deploy/schemas (core.yaml, or vendor its CRD)")
            return
        errors = sorted(self.validator(key).iter_errors(o), key=lambda e: list(e.absolute_path))
        for e in errors[:25]:
            path = "/".join(str(p) for p in e.absolute_path) or "(top)"
            problems.add(where, f"{path}: {e.message[:300]}")
        if len(errors) > 25:
            problems.add(where, f"... and {len(errors) - 25} more schema errors")


# ---------------------------------------------------------------- policy

# What wsbridge's manifests must say, beyond being valid API objects.
RUNTIME_CLASS = "gvisor"
RUNTIME_HANDLER = "runsc"
AGENTD_UID = 10001
AGENTD_PORT = 9000
CLIENT_NS_LABEL = ("wsbridge.dev/agentd-client", "true")
WORKSPACE = "/workspace"
# deploy/agent-sandbox/rbac.yaml, verb for verb (see the comment there).
CLIENT_ROLE = "wsbridge-client"
CLIENT_RULES = {
    ("extensions.agents.x-k8s.io", "sandboxclaims"): {"create", "get", "list", "watch", "delete"},
    ("agents.x-k8s.io", "sandboxes"): {"get", "list", "watch", "patch"},
    ("", "pods"): {"get", "list"},
    ("", "pods/exec"): {"get", "create"},
}


def is_loopback(addr):
    host = addr.rsplit(":", 1)[0].strip("[]")
    return addr.startswith("unix:") or host in ("localhost", "::1") or host.startswith("127.")


def policy_pod(where, spec, env, problems, pvc_names, vct_names):
    """A pod template that runs agentd."""
    p = lambda what: problems.add(where, what)  # noqa: E731
    if spec.get("runtimeClassName") != RUNTIME_CLASS:
        p(f"spec.runtimeClassName is {spec.get('runtimeClassName')!r}, not {RUNTIME_CLASS!r}: "
          "without it the pod runs under runc, unsandboxed, and nothing reports it")
    if spec.get("automountServiceAccountToken") is not False:
        p("spec.automountServiceAccountToken must be false: the agent's commands run in this pod")
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            p(f"spec.{field} must not be set")
    sc = spec.get("securityContext") or {}
    if sc.get("runAsNonRoot") is not True:
        p("spec.securityContext.runAsNonRoot must be true")
    for field in ("runAsUser", "fsGroup"):
        if sc.get(field) != AGENTD_UID:
            p(f"spec.securityContext.{field} must be {AGENTD_UID} (the image's agent user)")
    if (sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        p("spec.securityContext.seccompProfile.type must be RuntimeDefault")
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    for v in volumes.values():
        if "hostPath" in v:
            p(f"volume {v.get('name')!r}: hostPath volumes are not allowed")
    want_image = f"{env['AGENTD_IMAGE']}:{env['AGENTD_TAG']}"
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    if not any(c.get("name") == "agentd" for c in spec.get("containers") or []):
        p("no container named agentd")
    for c in containers:
        cw = f"container {c.get('name')!r}"
        if c.get("image") != want_image:
            p(f"{cw}: image {c.get('image')!r} is not {want_image} (images/image.env)")
        csc = c.get("securityContext") or {}
        if csc.get("allowPrivilegeEscalation") is not False:
            p(f"{cw}: securityContext.allowPrivilegeEscalation must be false")
        if csc.get("readOnlyRootFilesystem") is not True:
            p(f"{cw}: securityContext.readOnlyRootFilesystem must be true")
        if csc.get("privileged"):
            p(f"{cw}: securityContext.privileged must not be set")
        if csc.get("runAsNonRoot") is False or csc.get("runAsUser") not in (None, AGENTD_UID):
            p(f"{cw}: securityContext must keep runAsNonRoot and uid {AGENTD_UID}")
        caps = csc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            p(f"{cw}: securityContext.capabilities.drop must contain ALL")
        if caps.get("add"):
            p(f"{cw}: securityContext.capabilities.add must be empty")
        res = c.get("resources") or {}
        for kind in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in (res.get(kind) or {}):
                    p(f"{cw}: resources.{kind}.{r} is missing")
        for m in c.get("volumeMounts") or []:
            if m.get("name") not in volumes and m.get("name") not in vct_names:
                p(f"{cw}: volumeMount {m.get('name')!r} names no volume")
        if c.get("name") != "agentd":
            continue
        args = c.get("args") or []
        listens = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--listen", "-l")]
        listens += [a.split("=", 1)[1] for a in args if a.startswith("--listen=")]
        if any(not is_loopback(a) for a in listens):
            if "--token-file" not in args and not any(a.startswith("--token-file=") for a in args):
                p(f"{cw}: listens beyond loopback ({', '.join(listens)}) without --token-file: "
                  "agentd refuses to start")
            else:
                tf = args[args.index("--token-file") + 1] if "--token-file" in args else \
                    next(a.split("=", 1)[1] for a in args if a.startswith("--token-file="))
                ok = False
                for m in c.get("volumeMounts") or []:
                    v = volumes.get(m.get("name")) or {}
                    if "secret" in v and tf.startswith(m.get("mountPath", "").rstrip("/") + "/"):
                        ok = True
                if not ok:
                    p(f"{cw}: --token-file {tf} is not in a mounted Secret volume")
        if "--stdio" in args:
            p(f"{cw}: --stdio is for kubectl exec, not for the container's command")
        if not any(pt.get("containerPort") == AGENTD_PORT for pt in c.get("ports") or []):
            p(f"{cw}: no containerPort {AGENTD_PORT}")
        probe = c.get("readinessProbe") or {}
        if (probe.get("grpc") or {}).get("port") != AGENTD_PORT:
            p(f"{cw}: readinessProbe must be grpc on port {AGENTD_PORT} (grpc.health.v1)")
        ws = [m for m in c.get("volumeMounts") or [] if m.get("mountPath") == WORKSPACE]
        if not ws:
            p(f"{cw}: nothing mounted at {WORKSPACE}")
        for m in ws:
            v = volumes.get(m.get("name"))
            if m.get("name") in vct_names:
                continue
            claim = ((v or {}).get("persistentVolumeClaim") or {}).get("claimName")
            if claim is None:
                p(f"{cw}: {WORKSPACE} is not on a PersistentVolumeClaim: the workspace "
                  "would not survive the pod")
            elif pvc_names is not None and claim not in pvc_names:
                p(f"{cw}: {WORKSPACE} claims PVC {claim!r}, which the manifests do not define")


def policy_ingress(where, ingress, problems):
    """Ingress rules: agentd's port, only from labelled namespaces."""
    if not ingress:
        problems.add(where, "no ingress rule for agentd's port")
    for i, rule in enumerate(ingress or []):
        rw = f"{where}: ingress[{i}]"
        peers = rule.get("from") or []
        if not peers:
            problems.add(rw, "admits every source (no `from`)")
        for peer in peers:
            ml = ((peer.get("namespaceSelector") or {}).get("matchLabels") or {})
            if ml.get(CLIENT_NS_LABEL[0]) != CLIENT_NS_LABEL[1] or "ipBlock" in peer:
                problems.add(rw, f"a peer other than namespaces labelled "
                             f"{CLIENT_NS_LABEL[0]}={CLIENT_NS_LABEL[1]}: {json.dumps(peer)}")
        ports = rule.get("ports") or []
        if not ports or any(pt.get("port") != AGENTD_PORT or pt.get("protocol", "TCP") != "TCP"
                            for pt in ports):
            problems.add(rw, f"must admit TCP {AGENTD_PORT} only, not {json.dumps(ports)}")


def policy(objs, env, problems, context=None, prefix=""):
    """wsbridge's rules across the rendered objects. context: other objects
    that references may point to (e.g. the warm pool a loose claim names)."""
    everything = objs + (context or [])
    by_kind = {}
    for o in everything:
        by_kind.setdefault(o.get("kind"), []).append(o)
    names = lambda kind: {(o.get("metadata") or {}).get("name") for o in by_kind.get(kind, [])}  # noqa: E731
    pvcs = names("PersistentVolumeClaim")
    defined_ns = names("Namespace")
    if defined_ns:
        for o in objs:
            ns = (o.get("metadata") or {}).get("namespace")
            if ns and ns not in defined_ns:
                problems.add(prefix + obj_name(o), f"namespace {ns!r} is not the Namespace the manifests "
                             f"define ({', '.join(sorted(map(str, defined_ns)))})")
    for o in objs:
        where = prefix + obj_name(o)
        kind, spec = o.get("kind"), o.get("spec") or {}
        group = o.get("apiVersion", "").rsplit("/", 1)[0]
        if group.endswith("agents.x-k8s.io") and not o.get("apiVersion", "").endswith("/v1beta1"):
            problems.add(where, f"{o['apiVersion']} is deprecated; wsbridge targets v1beta1")
        if kind not in CLUSTER_SCOPED and not (o.get("metadata") or {}).get("namespace"):
            problems.add(where, "no namespace")
        if kind == "Deployment":
            tmpl = spec.get("template") or {}
            labels = (tmpl.get("metadata") or {}).get("labels") or {}
            sel = (spec.get("selector") or {}).get("matchLabels") or {}
            if any(labels.get(k) != v for k, v in sel.items()):
                problems.add(where, "spec.selector does not match the pod template's labels")
            if spec.get("replicas", 1) > 1 or (spec.get("strategy") or {}).get("type") != "Recreate":
                problems.add(where, "one ReadWriteOnce workspace: replicas <= 1 and strategy Recreate")
            policy_pod(f"{where}: template", tmpl.get("spec") or {}, env, problems, pvcs, set())
        elif kind == "SandboxTemplate":
            vcts = {(v.get("metadata") or {}).get("name") for v in spec.get("volumeClaimTemplates") or []}
            pt = spec.get("podTemplate") or {}
            policy_pod(f"{where}: podTemplate", pt.get("spec") or {}, env, problems, None, vcts)
            c = next((c for c in (pt.get("spec") or {}).get("containers") or []
                      if c.get("name") == "agentd"), {})
            if not any(m.get("mountPath") == WORKSPACE and m.get("name") in vcts
                       for m in c.get("volumeMounts") or []):
                problems.add(where, f"{WORKSPACE} must be a volumeClaimTemplate, or suspend "
                             "and resume lose the workspace")
            if spec.get("networkPolicyManagement", "Managed") != "Managed":
                problems.add(where, "networkPolicyManagement must be Managed")
            if not isinstance(spec.get("networkPolicy"), dict):
                problems.add(where, "no networkPolicy: the controller's default admits only its "
                             "sandbox-router")
            else:
                policy_ingress(f"{where}: networkPolicy", spec["networkPolicy"].get("ingress"), problems)
        elif kind == "NetworkPolicy":
            if "Ingress" not in (spec.get("policyTypes") or []):
                problems.add(where, "policyTypes must include Ingress")
            policy_ingress(where, spec.get("ingress"), problems)
        elif kind == "RuntimeClass":
            if (o.get("metadata") or {}).get("name") == RUNTIME_CLASS and o.get("handler") != RUNTIME_HANDLER:
                problems.add(where, f"handler must be {RUNTIME_HANDLER!r} (the containerd runtime "
                             "kind-config.yaml registers)")
        elif kind == "Service":
            sel = spec.get("selector") or {}
            targets = [d for d in by_kind.get("Deployment", [])
                       if all((((d.get("spec") or {}).get("template") or {}).get("metadata") or {})
                              .get("labels", {}).get(k) == v for k, v in sel.items())]
            if not sel or not targets:
                problems.add(where, "selects no Deployment's pods")
        elif kind == "Role" and (o.get("metadata") or {}).get("name") == CLIENT_ROLE:
            got = {}
            for r in o.get("rules") or []:
                for g in r.get("apiGroups") or []:
                    for res in r.get("resources") or []:
                        got.setdefault((g, res), set()).update(r.get("verbs") or [])
                if r.get("resourceNames") or r.get("nonResourceURLs"):
                    problems.add(where, "rules must not use resourceNames or nonResourceURLs")
            for key in sorted(set(got) | set(CLIENT_RULES)):
                want, have = CLIENT_RULES.get(key, set()), got.get(key, set())
                if want != have:
                    problems.add(where, f"{key[0] or 'core'}/{key[1]}: verbs {sorted(have)}, "
                                 f"want exactly {sorted(want)}")
        elif kind == "RoleBinding":
            ref = o.get("roleRef") or {}
            if ref.get("kind") == "Role" and ref.get("name") not in names("Role"):
                problems.add(where, f"roleRef names Role {ref.get('name')!r}, which is not defined")
            sas = {((s.get("metadata") or {}).get("name"), (s.get("metadata") or {}).get("namespace"))
                   for s in by_kind.get("ServiceAccount", [])}
            for s in o.get("subjects") or []:
                if s.get("kind") == "ServiceAccount" and (s.get("name"), s.get("namespace")) not in sas:
                    problems.add(where, f"subject ServiceAccount {s.get('namespace')}/{s.get('name')} "
                                 "is not defined (a ServiceAccount subject needs its namespace)")
        elif kind == "SandboxWarmPool":
            ref = (spec.get("sandboxTemplateRef") or {}).get("name")
            if ref not in names("SandboxTemplate"):
                problems.add(where, f"sandboxTemplateRef names {ref!r}, which is not defined")
        elif kind == "SandboxClaim":
            ref = (spec.get("warmPoolRef") or {}).get("name")
            if ref not in names("SandboxWarmPool"):
                problems.add(where, f"warmPoolRef names {ref!r}, which is not defined")
    return problems


# ---------------------------------------------------------------- commands


def cmd_render(root, args):
    if not args:
        raise CheckError("render DIR [--engine auto|python|kubectl]")
    engine = args[2] if len(args) >= 3 and args[1] == "--engine" else None
    objs, _ = render(os.path.abspath(args[0]), engine)
    sys.stdout.write(yaml.safe_dump_all(sorted(objs, key=sort_key), sort_keys=True))
    return 0


def canonical(objs):
    return sorted(json.dumps(o, sort_keys=True) for o in objs)


def cmd_compare(root, args):
    problems = Problems()
    if not kubectl_kustomize_usable():
        print("skip compare: no kubectl with kustomize v4 or newer")
        return SKIP
    for d in map(os.path.abspath, args):
        a, b = canonical(render_kubectl(d)), canonical(render_python(d))
        if a != b:
            only_k = [json.loads(x) for x in sorted(set(a) - set(b))]
            only_p = [json.loads(x) for x in sorted(set(b) - set(a))]
            problems.add(rel(root, d), "kubectl kustomize and the fallback renderer differ: "
                         f"kubectl only {[obj_name(o) for o in only_k]}, "
                         f"fallback only {[obj_name(o) for o in only_p]}")
    return problems.report(f"kubectl kustomize == fallback renderer: {', '.join(rel(root, d) for d in args)}")


def validate_objs(objs, where_prefix, schemas, env, problems, context=None):
    seen = set()
    for o in objs:
        key = (o.get("apiVersion"), o.get("kind"), (o.get("metadata") or {}).get("namespace"),
               (o.get("metadata") or {}).get("name"))
        if key in seen:
            problems.add(f"{where_prefix}{obj_name(o)}", "defined twice")
        seen.add(key)
        schemas.validate(o, f"{where_prefix}{obj_name(o)}", problems)
    policy(objs, env, problems, context, where_prefix)


def cmd_validate(root, args, schemas=None):
    schemas = schemas or Schemas(root)
    env = load_env(os.path.join(root, "images", "image.env"))
    status = 0
    for d in map(os.path.abspath, args):
        problems = Problems()
        objs, engine = render(d)
        validate_objs(objs, f"{rel(root, d)}: ", schemas, env, problems)
        status |= problems.report(f"{rel(root, d)}: {len(objs)} objects valid "
                                  f"(rendered by {engine}; schema + policy)")
    return status


def cmd_validate_files(root, args, schemas=None):
    schemas = schemas or Schemas(root)
    env = load_env(os.path.join(root, "images", "image.env"))
    context, _ = render(os.path.join(root, "deploy", "agent-sandbox"))
    problems = Problems()
    n = 0
    for f in (a if a == "-" else os.path.abspath(a) for a in args):
        docs = load_yaml_docs("<stdin>", sys.stdin.read()) if f == "-" else load_yaml_docs(f)
        if not docs:
            problems.add(f, "no objects")
        n += len(docs)
        validate_objs(docs, f"{f if f == '-' else rel(root, f)}: ", schemas, env, problems, context)
    return problems.report(f"{', '.join(a if a == '-' else rel(root, a) for a in args)}: "
                           f"{n} objects valid (schema + policy)")


# containerd-shim-runsc-v1's options (gVisor pkg/shim/runsc, type Options,
# toml tags); the shim ignores a file it cannot decode, silently.
RUNSC_SHIM_OPTIONS = {"shim_cgroup": str, "io_uid": int, "io_gid": int, "binary_name": str,
                      "root": str, "log_level": str, "log_path": str, "grouping": bool,
                      "runsc_config": dict}
CRI_PLUGIN = "io.containerd.grpc.v1.cri"


def cmd_kind_config(root, args):
    problems = Problems()
    path = args[0] if args else os.path.join(root, "deploy", "kind", "kind-config.yaml")
    where = rel(root, path)
    cfg = load_yaml(path)
    schema = load_yaml(os.path.join(root, "tests", "deploy", "schemas", "kind-v1alpha4.yaml"))
    for e in sorted(jsonschema.Draft7Validator(schema).iter_errors(cfg), key=lambda e: list(e.absolute_path)):
        problems.add(where, f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}")
    if problems.lines:
        return problems.report(where)
    # The containerd patches, merged in order, as containerd would see them.
    merged = {}

    def merge(dst, src):
        for k, v in src.items():
            if isinstance(v, dict) and isinstance(dst.get(k), dict):
                merge(dst[k], v)
            else:
                dst[k] = v
    for i, patch in enumerate(cfg.get("containerdConfigPatches") or []):
        try:
            merge(merged, tomllib.loads(patch))
        except tomllib.TOMLDecodeError as e:
            problems.add(where, f"containerdConfigPatches[{i}] is not TOML: {e}")
    runtimes = (((merged.get("plugins") or {}).get(CRI_PLUGIN) or {}).get("containerd") or {}).get("runtimes") or {}
    rt = runtimes.get(RUNTIME_HANDLER)
    config_path = None
    if not isinstance(rt, dict):
        problems.add(where, f"containerdConfigPatches register no runtime {RUNTIME_HANDLER!r} under "
                     f"plugins.\"{CRI_PLUGIN}\".containerd.runtimes (the RuntimeClass handler; kind "
                     "nodes use containerd config version 2 paths)")
    else:
        if rt.get("runtime_type") != "io.containerd.runsc.v1":
            problems.add(where, f"runtime {RUNTIME_HANDLER}: runtime_type must be io.containerd.runsc.v1")
        opts = rt.get("options") or {}
        if opts.get("TypeUrl") != "io.containerd.runsc.v1.options":
            problems.add(where, f"runtime {RUNTIME_HANDLER}: options.TypeUrl must be io.containerd.runsc.v1.options")
        config_path = opts.get("ConfigPath")
        if not config_path:
            problems.add(where, f"runtime {RUNTIME_HANDLER}: options.ConfigPath is not set")
        extra = sorted(set(rt) - {"runtime_type", "options", "pod_annotations"})
        if extra:
            problems.add(where, f"runtime {RUNTIME_HANDLER}: unexpected keys {extra}")
    # The RuntimeClass of deploy/kind names this handler.
    kind_dir = os.path.join(root, "deploy", "kind")
    try:
        rcs = [o for o in render_python(kind_dir) if o["kind"] == "RuntimeClass"]
    except CheckError as e:
        rcs = []
        problems.add(where, f"cannot render {rel(root, kind_dir)}: {e}")
    if not any(o.get("handler") == RUNTIME_HANDLER for o in rcs):
        problems.add(where, f"no RuntimeClass in deploy/kind with handler {RUNTIME_HANDLER!r}")
    # Every node gets the shim config from the tree, read-only, at ConfigPath.
    nodes = cfg.get("nodes") or [{"role": "control-plane"}]
    toml_files = set()
    for i, node in enumerate(nodes):
        mounts = [m for m in node.get("extraMounts") or [] if m.get("containerPath") == config_path]
        if config_path and not mounts:
            problems.add(where, f"nodes[{i}] ({node.get('role', 'control-plane')}): no extraMount "
                         f"puts runsc.toml at {config_path}")
        for m in mounts:
            if not m.get("readOnly"):
                problems.add(where, f"nodes[{i}]: the runsc.toml mount should be readOnly")
            host = m["hostPath"]
            if not os.path.isabs(host):
                # kind resolves it against its working directory; up.sh runs
                # kind in the config's directory.
                host = os.path.join(os.path.dirname(os.path.abspath(path)), host)
            if not os.path.isfile(host):
                problems.add(where, f"nodes[{i}]: extraMount hostPath {m['hostPath']!r}: no such file "
                             "(relative to the config's directory, where up.sh runs kind)")
            else:
                toml_files.add(host)
    for f in sorted(toml_files):
        fw = rel(root, f)
        try:
            with open(f, "rb") as fh:
                shim = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as e:
            problems.add(fw, f"not TOML: {e}")
            continue
        for k, v in shim.items():
            if k not in RUNSC_SHIM_OPTIONS:
                problems.add(fw, f"{k!r} is not a containerd-shim-runsc-v1 option "
                             f"({', '.join(sorted(RUNSC_SHIM_OPTIONS))})")
            elif not isinstance(v, RUNSC_SHIM_OPTIONS[k]):
                problems.add(fw, f"{k}: wrong type {type(v).__name__}")
        for k, v in (shim.get("runsc_config") or {}).items():
            if not isinstance(v, str):
                problems.add(fw, f"runsc_config.{k} = {v!r}: every value must be a string "
                             "(the shim decodes a map of strings, and drops the whole file otherwise)")
        if shim.get("runsc_config", {}).get("network") == "host":
            problems.add(fw, "runsc_config.network = \"host\" hands the host's network stack to the sandbox")
        if shim.get("runsc_config", {}).get("systemd-cgroup") == "true":
            problems.add(fw, "systemd-cgroup would need systemd cgroup paths, which containerd "
                         "passes only to runc")
    return problems.report(f"{where}: kind v1alpha4 config, runsc runtime, runsc.toml")


# kind releases and the node image (tag@digest) their release notes pair
# with them; kind's default node image of that release.
KIND_RELEASE_NODE_IMAGES = {
    "v0.32.0": "kindest/node:v1.36.1@sha256:3489c7674813ba5d8b1a9977baea8a6e553784dab7b84759d1014dbd78f7ebd5",
}

ENV_FORMATS = {
    "AGENTD_IMAGE": r"[a-z0-9]+([._/-][a-z0-9]+)*",
    "AGENTD_TAG": r"\d+\.\d+\.\d+([-.][0-9A-Za-z.]+)?",
    "DEBIAN_IMAGE": r"debian:12\.\d+-slim(@sha256:[0-9a-f]{64})?",
    "KIND_VERSION": r"v\d+\.\d+\.\d+",
    "KIND_NODE_IMAGE": r"kindest/node:v\d+\.\d+\.\d+@sha256:[0-9a-f]{64}",
    "GVISOR_RELEASE": r"\d{8}\.\d+",
    "GVISOR_RUNSC_SHA512_X86_64": r"[0-9a-f]{128}",
    "GVISOR_SHIM_SHA512_X86_64": r"[0-9a-f]{128}",
    "GVISOR_RUNSC_SHA512_AARCH64": r"[0-9a-f]{128}",
    "GVISOR_SHIM_SHA512_AARCH64": r"[0-9a-f]{128}",
    "KIND_GVISOR_NODE_IMAGE": r"[a-z0-9]+([._/-][a-z0-9]+)*:[0-9A-Za-z._-]+",
    "AGENT_SANDBOX_VERSION": r"v\d+\.\d+\.\d+",
    "KIND_CLUSTER": r"[a-z0-9]([-a-z0-9]*[a-z0-9])?",
}

# Dockerfile ARG defaults that copy image.env values.
DOCKERFILE_ARGS = {
    "images/agentd.Dockerfile": ["DEBIAN_IMAGE", "AGENTD_IMAGE", "AGENTD_TAG"],
    "images/kind-node-gvisor.Dockerfile": [
        "DEBIAN_IMAGE", "KIND_NODE_IMAGE", "GVISOR_RELEASE",
        "GVISOR_RUNSC_SHA512_X86_64", "GVISOR_SHIM_SHA512_X86_64",
        "GVISOR_RUNSC_SHA512_AARCH64", "GVISOR_SHIM_SHA512_AARCH64"],
}


def run_script(root, argv):
    env = dict(os.environ, PATH=os.environ.get("PATH", "/usr/bin:/bin"))
    p = subprocess.run(["bash"] + argv, cwd=root, capture_output=True, text=True, timeout=60, env=env)
    if p.returncode != 0:
        raise CheckError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()[:500]}")
    return p.stdout


def cmd_versions(root, args):
    problems = Problems()
    env_path = os.path.join(root, "images", "image.env")
    env = load_env(env_path)
    ew = rel(root, env_path)
    for key, fmt in ENV_FORMATS.items():
        if key not in env:
            problems.add(ew, f"{key} is not defined")
        elif not re.fullmatch(fmt, env[key]):
            problems.add(ew, f"{key}={env[key]} does not look like /{fmt}/")
    for key in sorted(set(env) - set(ENV_FORMATS)):
        problems.add(ew, f"{key}: unknown key (add it to ENV_FORMATS in {rel(root, __file__)})")
    if problems.lines:
        return problems.report("images/image.env")
    image = f"{env['AGENTD_IMAGE']}:{env['AGENTD_TAG']}"

    # kind: the node image is the one of the CLI release.
    want_node = KIND_RELEASE_NODE_IMAGES.get(env["KIND_VERSION"])
    if want_node is None:
        problems.add(ew, f"KIND_VERSION {env['KIND_VERSION']}: add its node image (from its release "
                     f"notes) to KIND_RELEASE_NODE_IMAGES in {rel(root, __file__)}")
    elif env["KIND_NODE_IMAGE"] != want_node:
        problems.add(ew, f"KIND_NODE_IMAGE {env['KIND_NODE_IMAGE']} is not kind {env['KIND_VERSION']}'s "
                     f"node image {want_node}: a node image must match the kind CLI")
    node_version = env["KIND_NODE_IMAGE"].split(":")[1].split("@")[0]
    gtag = env["KIND_GVISOR_NODE_IMAGE"].rsplit(":", 1)[1]
    if node_version not in gtag or env["GVISOR_RELEASE"] not in gtag:
        problems.add(ew, f"KIND_GVISOR_NODE_IMAGE tag {gtag} must name the node version {node_version} "
                     f"and GVISOR_RELEASE {env['GVISOR_RELEASE']}")

    # The release wsbridge builds.
    try:
        with open(os.path.join(root, "meson.build"), encoding="utf-8") as f:
            m = re.search(r"project\([^)]*?version:\s*'([^']+)'", f.read(), re.S)
        if not m or m.group(1) != env["AGENTD_TAG"]:
            problems.add(ew, f"AGENTD_TAG {env['AGENTD_TAG']} is not meson.build's project version "
                         f"{m.group(1) if m else '?'} (what agentd --version prints)")
    except OSError as e:
        problems.add("meson.build", str(e))

    # The vendored CRDs are of the controller release the scripts install.
    src = os.path.join(root, "tests", "deploy", "schemas", "agent-sandbox", "SOURCE.txt")
    try:
        with open(src, encoding="utf-8") as f:
            if f"tag {env['AGENT_SANDBOX_VERSION']} " not in f.read():
                problems.add(rel(root, src), f"does not name release {env['AGENT_SANDBOX_VERSION']} "
                             "(AGENT_SANDBOX_VERSION): vendor that release's CRDs")
    except OSError as e:
        problems.add(rel(root, src), str(e))

    # kustomize images: blocks.
    for d in ("deploy/kind", "deploy/agent-sandbox"):
        try:
            kpath = find_kustomization(os.path.join(root, d))
            images = (load_yaml(kpath) or {}).get("images")
        except CheckError as e:
            problems.add(d, str(e))
            continue
        want = [{"name": "agentd", "newName": env["AGENTD_IMAGE"], "newTag": env["AGENTD_TAG"]}]
        if images != want:
            problems.add(rel(root, kpath), f"images: is {images}, want {want} (run images/sync.sh)")
        # and what comes out of it
        try:
            objs, _ = render(os.path.join(root, d))
        except CheckError as e:
            problems.add(d, str(e))
            continue
        found = set()

        def walk(n):
            if isinstance(n, dict):
                for k, v in n.items():
                    if k in ("containers", "initContainers") and isinstance(v, list):
                        found.update(c.get("image") for c in v if isinstance(c, dict))
                    walk(v)
            elif isinstance(n, list):
                for v in n:
                    walk(v)
        walk(objs)
        if found != {image}:
            problems.add(f"{d} (rendered)", f"images {sorted(map(str, found))}, want only {image}")

    # Dockerfiles: ARG defaults and labels.
    for df, keys in DOCKERFILE_ARGS.items():
        try:
            with open(os.path.join(root, df), encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            problems.add(df, str(e))
            continue
        for key in keys:
            defaults = re.findall(rf"^ARG {key}=(\S+)$", text, re.M)
            if not defaults:
                problems.add(df, f"no `ARG {key}=` default")
            for v in defaults:
                if v != env[key]:
                    problems.add(df, f"ARG {key}={v}, but images/image.env says {env[key]}")
        if df == "images/agentd.Dockerfile":
            for label in ('org.opencontainers.image.version="${AGENTD_TAG}"',
                          'org.opencontainers.image.ref.name="${AGENTD_IMAGE}:${AGENTD_TAG}"'):
                if label not in text:
                    problems.add(df, f"no LABEL {label}")

    # The build script and the kind path, as they would run.
    try:
        out = run_script(root, ["images/build.sh", "--print"])
        if not re.search(rf"docker build .*-t {re.escape(image)} ", out):
            problems.add("images/build.sh --print", f"does not build -t {image}")
        for key in DOCKERFILE_ARGS["images/agentd.Dockerfile"] + DOCKERFILE_ARGS["images/kind-node-gvisor.Dockerfile"]:
            if f"--build-arg {key}={env[key]} " not in out:
                problems.add("images/build.sh --print", f"does not pass --build-arg {key}={env[key]}")
        if f"-t {env['KIND_GVISOR_NODE_IMAGE']} " not in out:
            problems.add("images/build.sh --print", f"does not build -t {env['KIND_GVISOR_NODE_IMAGE']}")
    except CheckError as e:
        problems.add("images/build.sh", str(e))
    try:
        out = run_script(root, ["deploy/kind/up.sh", "--dry-run"])
        if f"kind load docker-image {image} --name {env['KIND_CLUSTER']}" not in out:
            problems.add("deploy/kind/up.sh --dry-run", f"does not kind load {image} into {env['KIND_CLUSTER']}")
        if f"--image {env['KIND_GVISOR_NODE_IMAGE']} " not in out:
            problems.add("deploy/kind/up.sh --dry-run", f"does not create the cluster from {env['KIND_GVISOR_NODE_IMAGE']}")
    except CheckError as e:
        problems.add("deploy/kind/up.sh", str(e))

    # Every literal mention in the tree's deployment files and docs.
    mentions = [
        (r"\b" + re.escape(env["AGENTD_IMAGE"]) + r":[0-9][^\s`'\")\]]*", image, "AGENTD_IMAGE:AGENTD_TAG"),
        (r"kindest/node:[^\s`'\")\]]+", env["KIND_NODE_IMAGE"], "KIND_NODE_IMAGE"),
        (re.escape(env["KIND_GVISOR_NODE_IMAGE"].rsplit(":", 1)[0]) + r":[^\s`'\")\]]+",
         env["KIND_GVISOR_NODE_IMAGE"], "KIND_GVISOR_NODE_IMAGE"),
        (r"\bkind v\d+\.\d+\.\d+", f"kind {env['KIND_VERSION']}", "KIND_VERSION"),
        (r"\bgVisor (?:release )?\d{8}\.\d+", None, "GVISOR_RELEASE"),
        (r"\bAgent Sandbox v\d+\.\d+\.\d+", f"Agent Sandbox {env['AGENT_SANDBOX_VERSION']}", "AGENT_SANDBOX_VERSION"),
    ]
    files = [os.path.join(root, "docs", "deploy.md")]
    for d in ("images", "deploy/kind", "deploy/agent-sandbox"):
        for dirpath, _, fnames in os.walk(os.path.join(root, d)):
            files += [os.path.join(dirpath, f) for f in sorted(fnames) if f != "image.env"]
    for f in files:
        try:
            with open(f, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as e:
            problems.add(rel(root, f), str(e))
            continue
        for pattern, want, key in mentions:
            for m in re.finditer(pattern, text):
                got = m.group(0)
                if key == "GVISOR_RELEASE":
                    ok = got.endswith(env["GVISOR_RELEASE"])
                elif key == "KIND_NODE_IMAGE":
                    # the tag alone, or tag@digest, of the pinned image
                    ok = want.startswith(got)
                else:
                    ok = got == want
                if not ok:
                    line = text.count("\n", 0, m.start()) + 1
                    problems.add(f"{rel(root, f)}:{line}", f"says {got!r}; images/image.env {key} says "
                                 f"{want or env['GVISOR_RELEASE']!r}")
    docs = os.path.join(root, "docs", "deploy.md")
    try:
        with open(docs, encoding="utf-8") as fh:
            text = fh.read()
        for want in (image, env["KIND_NODE_IMAGE"], env["KIND_VERSION"], env["GVISOR_RELEASE"],
                     env["AGENT_SANDBOX_VERSION"]):
            if want not in text:
                problems.add("docs/deploy.md", f"does not mention {want}")
    except OSError as e:
        problems.add("docs/deploy.md", str(e))
    return problems.report(f"image {image} and the pinned versions agree everywhere")


def dockerfile_instructions(text):
    """(line, INSTRUCTION, arguments) of a Dockerfile, continuations joined
    and comments dropped (the default escape character, backslash)."""
    out, buf, start = [], "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1]
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((start, word.upper(), rest.strip()))
        buf = ""
    return out


def cmd_dockerfiles(root, args):
    """The Dockerfiles, as far as can be checked without Docker: pinned
    bases, exec-form ENTRYPOINT/CMD/HEALTHCHECK, a non-root final USER, and
    every RUN script through `sh -n` and shellcheck (as /bin/sh: dash)."""
    problems = Problems()
    env = load_env(os.path.join(root, "images", "image.env"))
    shellcheck = shutil.which("shellcheck")
    for df in DOCKERFILE_ARGS:
        try:
            with open(os.path.join(root, df), encoding="utf-8") as f:
                ins = dockerfile_instructions(f.read())
        except OSError as e:
            problems.add(df, str(e))
            continue
        args_seen = {}
        stages = []
        for line, word, rest in ins:
            where = f"{df}:{line}"
            if word == "ARG":
                k, _, v = rest.partition("=")
                if v:
                    args_seen[k] = v
            elif word == "FROM":
                ref = rest.split()[0]
                m = re.fullmatch(r"\$\{(\w+)\}", ref)
                value = args_seen.get(m.group(1)) if m else ref
                if m and m.group(1) not in env:
                    problems.add(where, f"FROM {ref}: not an images/image.env value")
                if not value or value.endswith(":latest") or ":" not in value:
                    problems.add(where, f"FROM {ref}: base image not pinned by tag")
                stages.append({"user": None, "entry": False})
            elif word == "USER":
                stages[-1]["user"] = rest
            elif word in ("ENTRYPOINT", "CMD") or (word == "HEALTHCHECK" and " CMD " in f" {rest}"):
                form = rest.split("CMD", 1)[1].strip() if word == "HEALTHCHECK" else rest
                try:
                    if not isinstance(json.loads(form), list):
                        raise ValueError
                except ValueError:
                    problems.add(where, f"{word}: use the exec (JSON) form, so signals reach the process")
                if word == "ENTRYPOINT":
                    stages[-1]["entry"] = True
            elif word == "RUN":
                body = rest
                if body.startswith("--"):
                    problems.add(where, "RUN flags are not checked here; keep RUN plain")
                script = "#!/bin/sh\n# shellcheck disable=SC2154\n" + body + "\n"
                p = subprocess.run(["sh", "-n"], input=script, capture_output=True, text=True)
                if p.returncode != 0:
                    problems.add(where, f"RUN is not valid sh: {p.stderr.strip()}")
                if shellcheck:
                    p = subprocess.run([shellcheck, "-s", "sh", "-f", "gcc", "-"], input=script,
                                       capture_output=True, text=True)
                    for finding in p.stdout.splitlines():
                        problems.add(where, f"RUN: {finding.split(':', 3)[-1].strip()}")
        if stages and stages[-1]["entry"]:
            user = stages[-1]["user"]
            if not user or user.split(":")[0] in ("0", "root"):
                problems.add(df, "the final stage runs as root: set USER to the agent uid")
    return problems.report("Dockerfiles: pinned bases, exec form, non-root, RUN scripts")


def cmd_crds(root, args):
    problems = Problems()
    d = os.path.join(root, "tests", "deploy", "schemas", "agent-sandbox")
    with open(os.path.join(d, "SOURCE.txt"), encoding="utf-8") as f:
        sums = dict((m.group(2), m.group(1)) for m in
                    re.finditer(r"^\s+([0-9a-f]{64})\s+\./(\S+)$", f.read(), re.M))
    files = sorted(f for f in os.listdir(d) if f.endswith(".yaml"))
    if set(files) != set(sums):
        problems.add(rel(root, d), f"files {files} are not the ones SOURCE.txt lists {sorted(sums)}")
    for f in files:
        with open(os.path.join(d, f), "rb") as fh:
            got = hashlib.sha256(fh.read()).hexdigest()
        if f in sums and got != sums[f]:
            problems.add(f"{rel(root, d)}/{f}", "differs from the vendored upstream file (SOURCE.txt sha256)")
    return problems.report("vendored Agent Sandbox CRDs unchanged")


def cmd_all(root, args):
    schemas = Schemas(root)
    status = cmd_crds(root, [])
    status |= cmd_versions(root, [])
    status |= cmd_dockerfiles(root, [])
    status |= cmd_kind_config(root, [])
    status |= cmd_validate(root, [os.path.join(root, "deploy", "kind"),
                                  os.path.join(root, "deploy", "agent-sandbox")], schemas)
    status |= cmd_validate_files(root, [os.path.join(root, "deploy", "agent-sandbox", "claim.yaml")], schemas)
    return status


COMMANDS = {
    "render": cmd_render, "compare": cmd_compare, "validate": cmd_validate,
    "validate-files": cmd_validate_files, "kind-config": cmd_kind_config,
    "versions": cmd_versions, "crds": cmd_crds, "dockerfiles": cmd_dockerfiles, "all": cmd_all,
}


def main(argv):
    root = os.path.normpath(os.path.join(HERE, "..", ".."))
    if len(argv) >= 2 and argv[0] == "--root":
        root, argv = os.path.abspath(argv[1]), argv[2:]
    if not argv or argv[0] not in COMMANDS:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return COMMANDS[argv[0]](root, argv[1:])
    except CheckError as e:
        print(f"FAIL {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a shape the checks did not expect: say where
        import traceback
        traceback.print_exc()
        print(f"FAIL deploycheck {argv[0]}: internal error on this input: {e!r}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
