#!/usr/bin/python3
"""deploy/k8s, checked by machine: the schema, the hardening, and the daemon the DaemonSet starts.

  k8s_test.py --part=schema    --manifests=DIR
  k8s_test.py --part=hardening --manifests=DIR
  k8s_test.py --part=daemon    --manifests=DIR --cubed=PATH --proto_dir=DIR

schema: every document of every *.yaml under DIR (examples/ too; kustomization.yaml is
kustomize's own file and checked by `hardening`) validates against the Kubernetes OpenAPI schemas
that the PyPI package kubernetes-validate bundles, in strict mode (an unknown field is an error),
for the oldest Kubernetes the manifests claim (1.27: grpc probes are GA there) and the newest
the package knows. A kind without a schema is an error, not a warning. The network is shut
off (socket.connect raises) while validating: the schemas must come from the package, never be
downloaded. Copies of the DaemonSet with a misspelt field and with a wrong type must be refused.
Exits 77 (skip) when kubernetes-validate is not installed (deploy/setup.sh installs it).

hardening: the DaemonSet keeps the settings of deploy/systemd/cubed.service (non-root, read-only
root file system, no privilege escalation, no capabilities, seccomp RuntimeDefault, a GPU from
the device plugin, grpc probes on --health_listen's port) and the parts agree with each other
(ports, Secrets, mounts, the Prometheus job, kustomization.yaml). Each mutation in MUTATIONS
breaks one setting in a copy, which the check must then report.

daemon: runs the real `cubed` with the DaemonSet's own args (paths moved under a temporary
directory, ports made 127.0.0.1:0, --backend=cpu, the auth config from the ConfigMap, a
generated TLS certificate and token) and checks what the cluster relies on: the probes'
services answer SERVING over plain text on the health port, which serves nothing else; remote
clients need TLS and the token; the metrics endpoint answers; SIGTERM ends it with status 0.

Exits 0 when every check passed, 1 on the first failure (named), 77 to skip.
"""

import argparse
import copy
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

import yaml

SKIP = 77
OLDEST_KUBERNETES = "1.27"
TOKEN = "k8s-test-token-0123456789abcdef"


class Failure(Exception):
    pass


def check(cond, what, detail=""):
    if not cond:
        raise Failure(f"{what}\n{detail}".rstrip())
    print(f"ok: {what}")


def documents(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def manifest_files(root):
    return sorted(f for f in glob.glob(os.path.join(root, "**", "*.yaml"), recursive=True)
                  if os.path.basename(f) != "kustomization.yaml")


def find(root, kind, name):
    for path in manifest_files(root):
        for d in documents(path):
            if d.get("kind") == kind and d["metadata"]["name"] == name:
                return d
    raise Failure(f"no {kind} named {name} under {root}")


# ---------------------------------------------------------------------------------------------
# schema


class NoNetwork:
    """Makes every socket connect fail while active: the validator must not download."""

    def __enter__(self):
        self.saved = socket.socket.connect, socket.create_connection

        def refuse(*args, **kwargs):
            raise OSError("k8s_test: network access during schema validation")

        socket.socket.connect = refuse
        socket.create_connection = refuse
        return self

    def __exit__(self, *exc):
        socket.socket.connect, socket.create_connection = self.saved


def schema_errors(validator, doc, versions):
    """Strict validation of one document against each version; a list of errors."""
    from kubernetes_validate import utils
    errors = []
    for version in versions:
        try:
            validator(doc, version, strict=True)
        except utils.ValidationError as e:
            where = ".".join(str(p) for p in e.path)
            errors.append(f"{doc.get('kind')} against {version}: {where}: {e.message}")
        except utils.SchemaNotFoundError as e:
            errors.append(e.message)
    return errors


def part_schema(manifests):
    try:
        from kubernetes_validate import utils
        from kubernetes_validate.version import __version__
    except ImportError:
        print("kubernetes-validate is not installed (deploy/setup.sh installs it): skipped")
        return SKIP
    versions = [OLDEST_KUBERNETES, utils.major_minor(utils.latest_version())]
    print(f"kubernetes-validate {__version__}; Kubernetes {', '.join(versions)}, strict")
    with NoNetwork():
        files = manifest_files(manifests)
        check(len(files) >= 6, f"{len(files)} manifest files under {manifests}")
        for path in files:
            docs = documents(path)
            check(docs, f"{os.path.relpath(path, manifests)} holds at least one document")
            for doc in docs:
                errors = schema_errors(utils.validate, doc, versions)
                check(not errors, f"{os.path.relpath(path, manifests)}: {doc['kind']} "
                      f"{doc['metadata']['name']} validates", "\n".join(errors))
        # The validator itself must be able to say no.
        ds = find(manifests, "DaemonSet", "cubed")
        misspelt = copy.deepcopy(ds)
        container = misspelt["spec"]["template"]["spec"]["containers"][0]
        container["securityContext"]["readOnlyRootFileSystem"] = True  # Not the field's name.
        check(schema_errors(utils.validate, misspelt, versions),
              "a DaemonSet with a misspelt securityContext field is refused")
        wrong_type = copy.deepcopy(ds)
        wrong_type["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "30s"
        check(schema_errors(utils.validate, wrong_type, versions),
              "a DaemonSet with a string for terminationGracePeriodSeconds is refused")
        unknown = {"apiVersion": "example.invalid/v1", "kind": "NoSuchKind",
                   "metadata": {"name": "x"}}
        check(schema_errors(utils.validate, unknown, versions),
              "a kind without a schema is refused, not passed with a warning")
    return 0


# ---------------------------------------------------------------------------------------------
# hardening


def flags_of(container):
    """--name=value args of a container as a dict (name without dashes)."""
    flags = {}
    for arg in container.get("args", []):
        if arg.startswith("--") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            flags[name] = value
    return flags


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def pod_spec(ds):
    return ds["spec"]["template"]["spec"]


def daemon_container(ds):
    return next(c for c in pod_spec(ds)["containers"] if c["name"] == "cubed")


def effective(container, pod, key):
    """A securityContext setting of the container, else of the pod."""
    sc = container.get("securityContext", {})
    return sc[key] if key in sc else pod.get("securityContext", {}).get(key)


def mount_of(container, path):
    """The volume mount whose mountPath holds `path`, or None."""
    best = None
    for m in container.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"]):
                best = m
    return best


def volume(pod, name):
    return next((v for v in pod.get("volumes", []) if v["name"] == name), None)


def hardening_problems(ds, service, policy, scrape, auth):
    """Every way the manifests fall short of the unit's hardening or disagree; [] when none."""
    problems = []
    pod = pod_spec(ds)
    c = daemon_container(ds)
    flags = flags_of(c)
    sc = c.get("securityContext", {})

    # The unit's settings.
    if effective(c, pod, "runAsNonRoot") is not True:
        problems.append("cubed: runAsNonRoot is not true (User=cubed)")
    if effective(c, pod, "runAsUser") in (None, 0):
        problems.append("cubed: runAsUser is unset or 0")
    if sc.get("readOnlyRootFilesystem") is not True:
        problems.append("cubed: readOnlyRootFilesystem is not true (ProtectSystem=strict)")
    if sc.get("allowPrivilegeEscalation") is not False:
        problems.append("cubed: allowPrivilegeEscalation is not false (NoNewPrivileges=yes)")
    if sc.get("privileged"):
        problems.append("cubed: privileged")
    caps = sc.get("capabilities", {})
    if "ALL" not in caps.get("drop", []) or caps.get("add"):
        problems.append("cubed: capabilities are not drop [ALL] with none added "
                        "(CapabilityBoundingSet=)")
    seccomp = effective(c, pod, "seccompProfile") or {}
    if seccomp.get("type") != "RuntimeDefault":
        problems.append("cubed: seccompProfile is not RuntimeDefault (SystemCallFilter=)")
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            problems.append(f"pod: {key} is true")
    if pod.get("automountServiceAccountToken") is not False:
        problems.append("pod: automountServiceAccountToken is not false (no API access needed)")
    for init in pod.get("initContainers", []):
        isc = init.get("securityContext", {})
        icaps = isc.get("capabilities", {})
        if "ALL" not in icaps.get("drop", []) or not set(icaps.get("add", [])) <= {"CHOWN",
                                                                                  "FOWNER"}:
            problems.append(f"{init['name']}: capabilities beyond CHOWN and FOWNER")
        if isc.get("allowPrivilegeEscalation") is not False or isc.get("privileged"):
            problems.append(f"{init['name']}: may escalate privileges")
        if isc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{init['name']}: readOnlyRootFilesystem is not true")
    for key in ("requests", "limits"):
        if str(c.get("resources", {}).get(key, {}).get("nvidia.com/gpu")) != "1":
            problems.append(f"cubed: resources.{key} has no nvidia.com/gpu: 1 (device plugin)")

    # Probes: grpc, on the port --health_listen serves.
    health_port = port_of(flags["health_listen"]) if "health_listen" in flags else None
    if health_port is None:
        problems.append("cubed: no --health_listen (the kubelet's grpc probe cannot use TLS)")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        p = c.get(probe)
        if p is None or "grpc" not in p:
            problems.append(f"cubed: {probe} is not a grpc probe")
        elif p["grpc"].get("port") != health_port:
            problems.append(f"cubed: {probe} probes port {p['grpc'].get('port')}, "
                            f"--health_listen serves {health_port}")
        elif p["grpc"].get("service", "") not in ("", "cubed.v1.Compute"):
            problems.append(f"cubed: {probe} asks for service {p['grpc']['service']!r}, "
                            "which health does not serve")

    # Named ports and the flags that bind them.
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    for name, flag in (("grpc", "tcp"), ("health", "health_listen"), ("metrics", "metrics_listen")):
        if flag not in flags or ports.get(name) != port_of(flags[flag]):
            problems.append(f"cubed: port {name} ({ports.get(name)}) is not --{flag}'s "
                            f"({flags.get(flag)})")

    # TLS from the Secret, tokens via the init container, auth from the ConfigMap.
    for flag, key in (("tls_cert", "tls.crt"), ("tls_key", "tls.key")):
        path = flags.get(flag)
        m = mount_of(c, path) if path else None
        v = volume(pod, m["name"]) if m else None
        if not v or v.get("secret", {}).get("secretName") != "cubed-tls" or \
                path != f"{m['mountPath']}/{key}":
            problems.append(f"cubed: --{flag} is not {key} of the Secret cubed-tls")
    auth_path = flags.get("auth_config")
    m = mount_of(c, auth_path) if auth_path else None
    v = volume(pod, m["name"]) if m else None
    if not v or v.get("configMap", {}).get("name") != auth["metadata"]["name"] or \
            os.path.basename(auth_path) not in auth.get("data", {}):
        problems.append("cubed: --auth_config is not a key of the ConfigMap cubed-auth")
    token_file = next((line.split('"')[1] for line in
                       auth.get("data", {}).get("auth.textproto", "").splitlines()
                       if line.strip().startswith("token_file:")), None)
    m = mount_of(c, token_file) if token_file else None
    if m is None or not any(mount_of(i, token_file) for i in pod.get("initContainers", [])):
        problems.append("cubed-auth: token_file is not where the init container writes tokens")
    listen = flags.get("listen", "")
    m = mount_of(c, listen)
    v = volume(pod, m["name"]) if m else None
    if not v or "hostPath" not in v:
        problems.append(f"cubed: --listen={listen} is not on a hostPath volume")

    # The Service, the NetworkPolicy, the Prometheus job.
    if service["spec"]["selector"] != ds["spec"]["selector"]["matchLabels"]:
        problems.append("service: its selector is not the DaemonSet's")
    for p in service["spec"]["ports"]:
        if p["targetPort"] not in ports:
            problems.append(f"service: targetPort {p['targetPort']} is no port of the container")
    policy_ports = {p["port"]: rule for rule in policy["spec"]["ingress"]
                    for p in rule.get("ports", [])}
    if "metrics" not in policy_ports or not policy_ports["metrics"].get("from"):
        problems.append("networkpolicy: the metrics port (no authentication) is open to all")
    for name in ("grpc", "health"):
        if name not in policy_ports:
            problems.append(f"networkpolicy: port {name} is not let in")
    job = yaml.safe_load(scrape["data"]["cubed-scrape.yaml"])["scrape_configs"][0]
    keeps = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"]
             if r.get("action") == "keep"}
    if keeps.get(("__meta_kubernetes_pod_container_port_name",)) != "metrics":
        problems.append("prometheus: the job does not keep the port named metrics")
    annotations = ds["spec"]["template"]["metadata"].get("annotations", {})
    if annotations.get("prometheus.io/port") != str(ports.get("metrics")):
        problems.append("cubed: the prometheus.io/port annotation is not the metrics port")
    return problems


MUTATIONS = [
    ("read-write root file system",
     lambda d: daemon_container(d)["securityContext"].pop("readOnlyRootFilesystem")),
    ("privilege escalation",
     lambda d: daemon_container(d)["securityContext"].update(allowPrivilegeEscalation=True)),
    ("root", lambda d: (daemon_container(d)["securityContext"].update(runAsUser=0),
                        daemon_container(d)["securityContext"].pop("runAsNonRoot"),
                        pod_spec(d)["securityContext"].pop("runAsNonRoot"))),
    ("a capability", lambda d: daemon_container(d)["securityContext"]["capabilities"].update(
        add=["SYS_ADMIN"])),
    ("no seccomp", lambda d: (daemon_container(d)["securityContext"].pop("seccompProfile"),
                              pod_spec(d)["securityContext"].pop("seccompProfile"))),
    ("privileged", lambda d: daemon_container(d)["securityContext"].update(privileged=True)),
    ("host network", lambda d: pod_spec(d).update(hostNetwork=True)),
    ("no GPU", lambda d: daemon_container(d)["resources"]["limits"].pop("nvidia.com/gpu")),
    ("an exec probe", lambda d: daemon_container(d).update(
        livenessProbe={"exec": {"command": ["true"]}})),
    ("a probe on the TLS port", lambda d: daemon_container(d)["readinessProbe"]["grpc"].update(
        port=50051)),
    ("an init container with SYS_ADMIN",
     lambda d: pod_spec(d)["initContainers"][0]["securityContext"]["capabilities"].update(
         add=["CHOWN", "SYS_ADMIN"])),
    ("a metrics port the flag does not bind", lambda d: daemon_container(d)["ports"][2].update(
        containerPort=9999)),
    ("TLS from elsewhere", lambda d: volume(pod_spec(d), "tls")["secret"].update(
        secretName="other")),
]


def part_hardening(manifests):
    ds = find(manifests, "DaemonSet", "cubed")
    service = find(manifests, "Service", "cubed")
    policy = find(manifests, "NetworkPolicy", "cubed")
    scrape = find(manifests, "ConfigMap", "cubed-prometheus-scrape")
    auth = find(manifests, "ConfigMap", "cubed-auth")
    problems = hardening_problems(ds, service, policy, scrape, auth)
    check(not problems, "the DaemonSet keeps the unit's hardening and its parts agree",
          "\n".join(problems))
    for what, mutate in MUTATIONS:
        broken = copy.deepcopy(ds)
        mutate(broken)
        check(hardening_problems(broken, service, policy, scrape, auth),
              f"a copy with {what} is reported")

    # kustomization.yaml: lists every manifest outside examples/, each once; names the image.
    with open(os.path.join(manifests, "kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    listed = sorted(k["resources"])
    present = sorted(os.path.relpath(p, manifests) for p in manifest_files(manifests)
                     if not os.path.relpath(p, manifests).startswith("examples/"))
    check(listed == present, "kustomization.yaml lists every manifest",
          f"listed {listed}\npresent {present}")
    namespace = find(manifests, "Namespace", k["namespace"])
    check(namespace["metadata"]["labels"].get("pod-security.kubernetes.io/enforce") ==
          "privileged", f"namespace {k['namespace']} exists and admits the hostPath volume")
    job = yaml.safe_load(scrape["data"]["cubed-scrape.yaml"])["scrape_configs"][0]
    check(job["kubernetes_sd_configs"][0]["namespaces"]["names"] == [k["namespace"]],
          "the Prometheus job looks in the namespace cubed is deployed to")
    images = {c["image"] for c in pod_spec(ds)["containers"] + pod_spec(ds)["initContainers"]}
    check(images == {i["name"] for i in k.get("images", [])},
          "every container's image is set by kustomization.yaml's images", str(images))
    return 0


# ---------------------------------------------------------------------------------------------
# daemon


def load_stubs(proto_dir, out_dir):
    from grpc_tools import protoc
    import grpc_tools
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    protos = [os.path.join(root, f) for root, _, files in os.walk(os.path.join(proto_dir, "cubed"))
              for f in files if f.endswith(".proto")]
    rc = protoc.main(["protoc", f"-I{proto_dir}", f"-I{include}", f"--python_out={out_dir}",
                      f"--grpc_python_out={out_dir}", *protos])
    if rc != 0:
        raise Failure(f"protoc failed ({rc})")
    sys.path.insert(0, out_dir)


def health_status(channel, service):
    """The ServingStatus number that grpc.health.v1.Health/Check answers for `service` (1 =
    SERVING), encoded by hand: the kubelet's call, without stubs for health.proto."""
    # HealthCheckRequest { string service = 1; }  HealthCheckResponse { ServingStatus status = 1; }
    encoded = service.encode()
    request = (b"\x0a" + bytes([len(encoded)]) + encoded) if encoded else b""
    call = channel.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=lambda b: b, response_deserializer=lambda b: b)
    answer = call(request, timeout=5)
    return answer[1] if len(answer) >= 2 and answer[0] == 0x08 else 0


def run_daemon_part(manifests, cubed, proto_dir, tmp):
    import grpc
    os.makedirs(os.path.join(tmp, "stubs"))
    load_stubs(proto_dir, os.path.join(tmp, "stubs"))
    from cubed.v1 import compute_pb2, compute_pb2_grpc

    ds = find(manifests, "DaemonSet", "cubed")
    auth = find(manifests, "ConfigMap", "cubed-auth")
    c = daemon_container(ds)
    root = os.path.join(tmp, "root")

    def moved(path):
        return os.path.join(root, path.lstrip("/"))

    # The pod's files: the TLS Secret, the auth ConfigMap, the tokens the init container copies.
    flags = flags_of(c)
    os.makedirs(os.path.dirname(moved(flags["tls_cert"])), exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=cubed.cubed.svc", "-addext",
                    "subjectAltName=DNS:cubed.cubed.svc,IP:127.0.0.1",
                    "-keyout", moved(flags["tls_key"]), "-out", moved(flags["tls_cert"])],
                   check=True, capture_output=True)
    text = auth["data"]["auth.textproto"]
    token_file = next(line.split('"')[1] for line in text.splitlines()
                      if line.strip().startswith("token_file:"))
    os.makedirs(os.path.dirname(moved(token_file)), exist_ok=True)
    fd = os.open(moved(token_file), os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, f"remote {TOKEN}\n".encode())
    os.close(fd)
    os.makedirs(os.path.dirname(moved(flags["auth_config"])), exist_ok=True)
    with open(moved(flags["auth_config"]), "w") as f:
        f.write(text.replace(f'"{token_file}"', f'"{moved(token_file)}"'))
    os.makedirs(moved(os.path.dirname(flags["listen"])), exist_ok=True)

    args = []
    for arg in c["args"]:
        name, _, value = arg[2:].partition("=")
        if name in ("tcp", "health_listen", "metrics_listen"):
            value = "127.0.0.1:0"
        elif name == "backend":
            value = "cpu"
        elif name == "memory_limit":
            value = "256MiB"
        elif name == "listen_group":
            value = str(os.getgid())  # Group 2000 needs membership (supplementalGroups).
        elif value.startswith("/"):
            value = moved(value)
        args.append(f"--{name}={value}")
    ready = os.path.join(tmp, "ready")
    log_path = os.path.join(tmp, "log")
    command = [cubed, *args, f"--ready_file={ready}"]
    print("running:", " ".join(command))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def log_text():
        with open(log_path, errors="replace") as f:
            return f.read()

    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            if proc.poll() is not None:
                raise Failure(f"cubed exited ({proc.returncode}) with the DaemonSet's args",
                              log_text())
            if time.monotonic() > deadline:
                raise Failure("cubed did not become ready in 60 s", log_text())
            time.sleep(0.02)
        addresses = dict(line.split("=", 1) for line in open(ready).read().splitlines())
        check({"tcp", "health", "metrics"} <= set(addresses),
              "the daemon serves TCP, the health listener and metrics", str(addresses))

        # The kubelet's grpc probes: plain text, each probe's service.
        with grpc.insecure_channel(addresses["health"]) as probe:
            for name in ("startupProbe", "livenessProbe", "readinessProbe"):
                service = c[name]["grpc"].get("service", "")
                check(health_status(probe, service) == 1,
                      f"{name} (service {service!r}) gets SERVING in plain text")
            try:
                compute_pb2_grpc.ComputeStub(probe).GetInfo(compute_pb2.GetInfoRequest(),
                                                            timeout=5)
                raise Failure("GetInfo answered on the health port")
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.UNIMPLEMENTED,
                      "the health port serves nothing but health", str(e))

        # Remote clients: TLS and the token.
        with open(moved(flags["tls_cert"]), "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        with grpc.secure_channel(addresses["tcp"], creds) as channel:
            stub = compute_pb2_grpc.ComputeStub(channel)
            metadata = [("authorization", f"Bearer {TOKEN}")]
            opened = stub.OpenSession(compute_pb2.OpenSessionRequest(), metadata=metadata,
                                      timeout=10)
            check(opened.session != 0, "a remote client with TLS and the token opens a session")
            stub.CloseSession(compute_pb2.CloseSessionRequest(session=opened.session),
                              metadata=metadata, timeout=10)
            try:
                stub.OpenSession(compute_pb2.OpenSessionRequest(), timeout=10)
                raise Failure("OpenSession without a token succeeded")
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.UNAUTHENTICATED,
                      "without the token: UNAUTHENTICATED", str(e))
        with grpc.insecure_channel(addresses["tcp"]) as plain:
            try:
                compute_pb2_grpc.ComputeStub(plain).GetInfo(compute_pb2.GetInfoRequest(),
                                                            timeout=3)
                raise Failure("plain text reached the TLS port")
            except grpc.RpcError as e:
                check(e.code() in (grpc.StatusCode.UNAVAILABLE,
                                   grpc.StatusCode.DEADLINE_EXCEEDED),
                      "plain text does not reach the TLS port", str(e))

        # Prometheus' scrape.
        with urllib.request.urlopen(f"http://{addresses['metrics']}/metrics", timeout=10) as r:
            body = r.read().decode()
        check(r.status == 200 and "cubed_uptime_microseconds" in body,
              "the metrics port answers GET /metrics")

        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        check(code == 0, "SIGTERM stops the daemon with status 0", log_text())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return 0


def part_daemon(manifests, cubed, proto_dir):
    tmp = tempfile.mkdtemp(prefix="cubed-k8s-")
    try:
        return run_daemon_part(manifests, cubed, proto_dir, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", required=True, choices=["schema", "hardening", "daemon"])
    parser.add_argument("--manifests", required=True)
    parser.add_argument("--cubed")
    parser.add_argument("--proto_dir")
    args = parser.parse_args()
    try:
        if args.part == "schema":
            return part_schema(args.manifests)
        if args.part == "hardening":
            return part_hardening(args.manifests)
        if not args.cubed or not args.proto_dir:
            parser.error("--part=daemon needs --cubed and --proto_dir")
        return part_daemon(args.manifests, args.cubed, args.proto_dir)
    except Failure as e:
        print(f"FAILED: {e}")
        return 1
    except Exception:
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
