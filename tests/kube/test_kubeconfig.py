"""A researcher's kubeconfig as kubectl reads it (skyrack.kube.kubeconfig): exec credential plugins run for real
(scripts that answer as kubelogin does), files named instead of data embedded, and the refusals, against a
local HTTPS server that takes a token or a client certificate of its CA, as an API server does."""

from __future__ import annotations

import base64
import http.server
import json
import sys
from pathlib import Path

import pytest
import yaml

from skyrack.errors import InputError
from skyrack.kube import job_cli, kubeconfig
from support import CONFIGS, run_cli

from .conftest import https_server


@pytest.fixture
def apiserver(ca, tmp_path):
    """Answers every GET with who it saw: the bearer token and the client certificate's common name."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            peer = self.connection.getpeercert() or {}
            cn = next((v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"), None)
            body = json.dumps({"token": self.headers.get("Authorization"), "cn": cn}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    with https_server(ca, tmp_path, Handler, client_cert=False) as endpoint:
        yield endpoint


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def write_config(d: Path, endpoint: str, user: dict, cluster: dict | None = None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    path = d / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "other", "cluster": {"server": "https://192.0.2.1:6443"}},
                     {"name": "c", "cluster": cluster or {"server": endpoint}}],
        "contexts": [{"name": "lab", "context": {"cluster": "c", "user": "me"}}],
        "users": [{"name": "someone-else", "user": {"token": "not-mine"}}, {"name": "me", "user": user}]}))
    return path


def plugin(d: Path, answer: str) -> Path:
    """An executable that records its arguments, environment and request, then prints `answer` (a Python
    expression over `args`)."""
    script = d / "bin" / "get-token"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"#!{sys.executable}\n"
                      "import json, os, sys\n"
                      "args = sys.argv[1:]\n"
                      f"open({str(d / 'seen.json')!r}, 'w').write(json.dumps({{'args': args, "
                      "'env': os.environ.get('LOGIN_TENANT'), 'info': json.loads(os.environ['KUBERNETES_EXEC_INFO'])}))\n"
                      f"{answer}\n")
    script.chmod(0o755)
    return script


def who(path: Path) -> dict:
    return job_cli.with_api(path, lambda call: call("GET", "/whoami"))


def test_an_exec_plugins_token_reaches_the_api_server(ca, apiserver, tmp_path):
    """v1, relative command (the kubeconfig's directory), args, env, provideClusterInfo: as kubectl runs it."""
    d = tmp_path / "kube"
    plugin(d, "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential', "
              "'status': {'token': 'tok-' + args[1], 'expirationTimestamp': '2099-01-01T00:00:00Z'}}))")
    cfg = write_config(d, apiserver, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": "./bin/get-token", "args": ["get", "robotics"],
        "env": [{"name": "LOGIN_TENANT", "value": "lab.example"}], "interactiveMode": "Never",
        "provideClusterInfo": True}}, {"server": apiserver, "certificate-authority-data": b64(ca.cert_pem)})
    assert who(cfg) == {"token": "Bearer tok-robotics", "cn": None}
    seen = json.loads((d / "seen.json").read_text())
    assert seen["args"] == ["get", "robotics"] and seen["env"] == "lab.example"
    assert seen["info"] == {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                            "spec": {"interactive": False, "cluster": {
                                "server": apiserver, "certificate-authority-data": b64(ca.cert_pem)}}}


def test_an_exec_plugins_client_certificate_is_presented(ca, apiserver, tmp_path):
    cert, key = ca.issue("researcher", client=True)
    d = tmp_path / "kube"
    plugin(d, "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', 'kind': 'ExecCredential', "
              f"'status': {{'clientCertificateData': {cert.decode()!r}, 'clientKeyData': {key.decode()!r}}}}}))")
    cfg = write_config(d, apiserver, {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                               "command": str(d / "bin/get-token")}},
                       {"server": apiserver, "certificate-authority-data": b64(ca.cert_pem)})
    assert who(cfg) == {"token": None, "cn": "researcher"}
    assert json.loads((d / "seen.json").read_text())["info"]["spec"] == {"interactive": False}  # no terminal here


def test_files_named_instead_of_data_are_read_from_the_kubeconfigs_directory(ca, apiserver, tmp_path):
    d = tmp_path / "kube"
    d.mkdir()
    (d / "ca.crt").write_text(ca.cert_pem)
    (d / "token").write_text("from-a-file\n")
    cert, key = ca.issue("file-user", client=True)
    (d / "me.crt").write_bytes(cert)
    (d / "me.key").write_bytes(key)
    cluster = {"server": apiserver, "certificate-authority": "ca.crt"}
    assert who(write_config(d, apiserver, {"tokenFile": "token"}, cluster)) == {"token": "Bearer from-a-file",
                                                                                "cn": None}
    assert who(write_config(d, apiserver, {"client-certificate": "me.crt", "client-key": str(d / "me.key")},
                            cluster)) == {"token": None, "cn": "file-user"}


V1 = "client.authentication.k8s.io/v1"


@pytest.mark.parametrize(("user", "answer", "field", "message"), [
    ({"exec": {"apiVersion": V1, "command": "./bin/get-token", "interactiveMode": "Never"}},
     "sys.stderr.write('error: login required: run kubelogin\\n'); sys.exit(1)", "users[1].user.exec",
     "exited with 1: error: login required: run kubelogin"),
    ({"exec": {"apiVersion": V1, "command": "./bin/get-token", "interactiveMode": "Never"}},
     "print('Open https://login.example/device and enter ABCD')", "users[1].user.exec",
     f"did not print an ExecCredential of {V1}"),
    ({"exec": {"apiVersion": V1, "command": "./bin/get-token", "interactiveMode": "Never"}},
     f"print(json.dumps({{'apiVersion': {V1!r}, 'kind': 'ExecCredential', 'status': {{}}}}))", "users[1].user.exec",
     "gave neither a token nor a client certificate and key"),
    ({"exec": {"apiVersion": V1, "command": "kubelogin-not-here", "interactiveMode": "Never",
               "installHint": "install kubelogin from the lab's wiki"}}, None, "users[1].user.exec.command",
     "'kubelogin-not-here' is not installed (install kubelogin from the lab's wiki)"),
    ({"exec": {"apiVersion": V1, "command": "./bin/get-token"}}, None, "users[1].user.exec.interactiveMode",
     "must be Never, IfAvailable or Always"),
    ({"exec": {"apiVersion": V1, "command": "./bin/get-token", "interactiveMode": "Always"}}, None,
     "users[1].user.exec", "needs a terminal"),
    ({"exec": {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"}}, None,
     "users[1].user.exec.apiVersion", "is not a credential plugin API skyrack speaks"),
    ({"auth-provider": {"name": "azure"}}, None, "users[1].user.auth-provider", "removed from kubectl in 1.26"),
    ({"tokenFile": "missing-token"}, None, "users[1].user.tokenFile", "cannot read"),
    ({"client-certificate-data": b64("x")}, None, "users[1].user", "needs its key"),
])
def test_credentials_that_cannot_be_had_name_the_field(ca, tmp_path, user, answer, field, message):
    d = tmp_path / "kube"
    if answer:
        plugin(d, answer)
    cfg = write_config(d, "https://127.0.0.1:9", user, {"server": "https://127.0.0.1:9",
                                                         "certificate-authority-data": b64(ca.cert_pem)})
    with pytest.raises(InputError) as exc:
        job_cli.connect(cfg)
    [problem] = exc.value.problems
    assert (problem.file, problem.path) == (str(cfg), field) and message in problem.message, problem


def test_a_plugin_runs_only_from_a_kubeconfig_the_user_named(tmp_path):
    """skyrack's own kubeconfigs (stack outputs) are read without running anything they might name."""
    text = write_config(tmp_path, "https://127.0.0.1:9", {"exec": {
        "apiVersion": V1, "command": "/bin/false", "interactiveMode": "Never"}}).read_text()
    with pytest.raises(InputError, match="only from a kubeconfig you name"):
        kubeconfig.credentials(text)


def test_a_cluster_that_is_not_verified_is_refused(tmp_path):
    cfg = write_config(tmp_path, "https://127.0.0.1:9", {"token": "t"},
                       {"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True})
    with pytest.raises(InputError) as exc:
        job_cli.connect(cfg)
    assert exc.value.problems[0].path == "clusters[1].cluster.insecure-skip-tls-verify"


def test_a_failing_plugin_is_one_error_line_and_nothing_is_sent(ca, tmp_path):
    d = tmp_path / "kube"
    plugin(d, "sys.stderr.write('token expired; run: kubelogin convert-kubeconfig\\n'); sys.exit(2)")
    cfg = write_config(d, "https://127.0.0.1:9", {"exec": {"apiVersion": V1, "command": "./bin/get-token",
                                                           "interactiveMode": "IfAvailable"}},
                       {"server": "https://127.0.0.1:9", "certificate-authority-data": b64(ca.cert_pem)})
    proc = run_cli("job", "status", str(CONFIGS / "prod.yaml"), "llama-ft", "--team", "robotics",
                   "--kubeconfig", str(cfg), timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (f"error {cfg}: users[1].user.exec: the credential plugin "
                                   f"'{d / 'bin/get-token'}' exited with 2: token expired; run: kubelogin "
                                   "convert-kubeconfig"), proc.stderr
    assert "ConnectionRefused" not in proc.stderr  # it stopped before reaching for the API server
